import pytest

from agents.prompts import COMPACT, PromptSettings, make_prompter


def _run(p, steps):
    obs0 = "Crafting commands:\ncraft 1 stick using 2 oak planks\n\nGoal: craft stick."
    info = {"admissible_actions": ["get 2 oak planks", "craft 1 stick using 2 oak planks"]}
    p.reset(0, obs0, info)
    obs = obs0
    for k in range(steps):
        p.record(0, obs, f"act {k}")
        obs = f"reply {k}"
    return p.user_text(0, obs, info)


def test_step0_has_observation_actions_and_format():
    text = _run(make_prompter("textcraft"), 0)
    assert "Goal: craft stick." in text and "'get 2 oak planks'" in text
    assert "<think>" in text and "<action>" in text and "Prior to this step" not in text


def test_history_keeps_last_h_and_counts_steps():
    text = _run(make_prompter("textcraft", PromptSettings(history_length=2)), 4)
    assert "already taken 4 step(s)" in text and "step 5" in text
    assert "Action 3: 'act 2'" in text and "Action 4: 'act 3'" in text and "act 1'" not in text
    assert "current observation is: reply 3" in text


def test_textcraft_does_not_repeat_recipes_in_history():
    text = _run(make_prompter("textcraft"), 1)
    assert text.count("craft 1 stick using 2 oak planks") == 2   # task text + admissible list


def test_compact_textcraft_task_is_goal_line():
    text = _run(make_prompter("textcraft", PromptSettings(compact=True, require_think=False)), 1)
    assert "Your task is to: Goal: craft stick." in text and "<think>" not in text


def test_webshop_and_alfworld_formatting():
    ws = make_prompter("webshop")
    obs = "WebShop [SEP] Instruction: [SEP] buy a red shirt [SEP] Search"
    ws.reset(0, obs, {})
    assert ws.tasks[0] == "buy a red shirt" and ws.format_obs(obs) == "'Search'"
    alf = make_prompter("alfworld")
    alf.reset(0, "You are in a room. Your task is to: put a mug on desk.", {})
    assert alf.tasks[0] == "put a mug on desk."
    assert "help" not in alf.format_actions(["go to desk 1", "help"])


def test_messages_always_have_a_system_turn_and_unknown_env_fails():
    p = make_prompter("alfworld")
    p.reset(0, "obs", {})
    assert p.messages(0, "obs", {})[0]["role"] == "system"
    with pytest.raises(ValueError, match="registered"):
        make_prompter("minecraft")


def test_compact_textcraft_without_admissible_puts_goal_before_recipes():
    settings = PromptSettings(compact=True, require_think=False, show_admissible=False)
    first = _run(make_prompter("textcraft", settings), 0)
    assert ("Your task is to: Goal: craft stick.\nCrafting commands:\n"
            "craft 1 stick using 2 oak planks\n" in first)
    assert "observation is: the crafting commands" in first       # the recipes are shown once
    later = _run(make_prompter("textcraft", settings), 1)
    assert ("Your task is to: Goal: craft stick.\nCrafting commands:\n"
            "craft 1 stick using 2 oak planks\n" in later)
    # full prompts: env text as is
    full = _run(make_prompter("textcraft", PromptSettings(show_admissible=False)), 0)
    assert ("observation is: Crafting commands:\ncraft 1 stick using 2 oak planks\n\n"
            "Goal: craft stick." in full)


def test_compact_prompts_of_a_task_share_their_head_and_show_what_each_action_gave():
    settings = PromptSettings(compact=True, require_think=False, show_admissible=False, history_length=2)
    texts = [_run(make_prompter("textcraft", settings), k) for k in range(4)]
    head = texts[0][:texts[0].index("Your current observation")]
    assert head.endswith("craft 1 stick using 2 oak planks\n") and all(t.startswith(head) for t in texts)
    # last h=2 actions, each followed by the observation it produced (the current one last)
    assert "act 1 -> reply 1\nact 2 -> reply 2\nAnswer with" in texts[3] and "act 0" not in texts[3]
    assert "Prior to this step" not in texts[3]


def test_textcraft_prompt_shows_the_useful_commands_other_envs_the_admissible_ones():
    info = {"admissible_actions": ["get 2 oak planks", "inventory"],
            "useful_commands": ["get 2 oak planks", "craft 1 stick using 2 oak planks", "inventory"]}
    obs = "Crafting commands:\ncraft 1 stick using 2 oak planks\n\nGoal: craft stick."
    tc = make_prompter("textcraft", PromptSettings(compact=True, require_think=False))
    tc.reset(0, obs, info)
    assert "'craft 1 stick using 2 oak planks', 'inventory']" in tc.user_text(0, obs, info)
    alf = make_prompter("alfworld")
    assert alf.shown_actions(info) == info["admissible_actions"]


ALF_RESET = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around "
             "you, you see a drawer 10, a drawer 2, a cabinet 1, and a sofa 1.\n\nYour task is to: put "
             "two box in sofa.")
ALF_ACTIONS = ["go to cabinet 1", "go to drawer 10", "go to drawer 2", "go to sofa 1", "inventory", "look",
               "examine sofa 1", "take box 3 from sofa 1", "help"]


def test_compact_alfworld_names_the_room_once_and_lists_only_local_actions():
    p = make_prompter("alfworld", PromptSettings(history_length=30, require_think=False, compact=True))
    p.reset(0, ALF_RESET, {})
    first = p.user_text(0, ALF_RESET, {"admissible_actions": ALF_ACTIONS})
    # the receptacles in natural order (drawer 2 before drawer 10), in the task line every prompt opens with
    assert "Your task is to: put two box in sofa.\nThe room's receptacles: cabinet 1, drawer 2, drawer 10, " \
           "sofa 1." in first
    assert "Welcome" not in first                       # the reset text is not repeated
    assert "Actions here: 'take box 3 from sofa 1'; or go to / examine a receptacle" in first
    for standing in ("'go to", "'look'", "'inventory'", "'examine", "'help'"):
        assert standing not in first
    p.record(0, ALF_RESET, "go to sofa 1")
    arrived = "You arrive at sofa 1. On the sofa 1, you see a box 3."
    second = p.user_text(0, arrived, {"admissible_actions": ["go to cabinet 1", "look", "inventory"]})
    assert second.endswith("Actions: go to / examine a receptacle, look, inventory.\n" + COMPACT)
    p.record(0, arrived, "take box 3 from sofa 1")
    third = p.user_text(0, "You pick up the box 3 from the sofa 1.", {"admissible_actions": ALF_ACTIONS})
    # each prompt extends the one before up to its action list: the carried cache runs only the new line
    assert third.startswith(second[:second.index("\nActions")])


def test_verl_alfworld_prompts_keep_the_full_admissible_list():
    p = make_prompter("alfworld", PromptSettings(require_think=True))
    p.reset(0, ALF_RESET, {})
    text = p.user_text(0, ALF_RESET, {"admissible_actions": ALF_ACTIONS})
    assert "'go to drawer 10'\n 'go to drawer 2'" in text and "'help'" not in text
    assert "Welcome to TextWorld" in text


def test_history_chars_clips_past_pages_only_and_keeps_earlier_prompts_a_prefix():
    head = "WebShop [SEP] Instruction: [SEP] red shoes [SEP] "
    page = head + " [SEP] ".join(["Back to Search", "Page 1 (Total results: 50)"]
                                 + [f"B0{k:08d} [SEP] Shoe {k}" for k in range(10)])
    settings = PromptSettings(compact=True, require_think=False, show_admissible=False, history_length=10,
                              history_chars=40)
    p = make_prompter("webshop", settings)
    p.reset(0, head + "Search", {})
    p.record(0, head + "Search", "search[red shoes]")
    before = p.user_text(0, page, {})
    p.record(0, page, "click[b000000003]")
    after = p.user_text(0, head + "Buy Now", {})
    assert "search[red shoes] -> 'Back to Search'" in before and "'Shoe 9'" in before    # current page: whole
    line = next(t for t in after.splitlines() if t.startswith("search[red shoes] -> "))
    assert line.endswith(" ...") and len(line) == len("search[red shoes] -> ") + 40 + 4  # past page: clipped
    assert "'Shoe 9'" not in after and "click[b000000003] -> 'Buy Now'" in after
    # what the policy saw before the clipped line stays a prefix of the later prompt (carried caches)
    assert after.startswith(before[:before.index("search[red shoes] -> ")])
    with pytest.raises(ValueError, match="history_chars must be >= 0"):
        PromptSettings(history_chars=-1)


def test_every_prompt_setting_of_a_config_is_a_prompt_field():
    # runs that replay another run's policy copy PROMPT_FIELDS: a field that changes the prompts but is not
    # among them would silently render other prompts (as sft_episodes once went missing from the warm start)
    import dataclasses

    from agents.config import PROMPT_FIELDS, TrainConfig
    from benchmarks.warm_start import COMMON
    base = TrainConfig(model="smollm2-135m")
    changes = {"history_length": 7, "history_chars": 50, "require_think": "yes", "compact_prompts": "no",
               "show_admissible": False, "model": "tiny"}
    moved = {k for k, v in changes.items()
             if dataclasses.replace(base, **{k: v}).prompt_settings() != base.prompt_settings()}
    assert moved - {"model"} == set(PROMPT_FIELDS) and set(PROMPT_FIELDS) <= set(COMMON)
    others = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in changes]
    for name in others:           # no other field changes the prompts
        value = getattr(base, name)
        if isinstance(value, bool):
            assert dataclasses.replace(base, **{name: not value}).prompt_settings() == base.prompt_settings()
