import pytest

from agents.prompts import PromptSettings, make_prompter


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
