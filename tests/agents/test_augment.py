"""SFT augmentation: renamed TextCraft examples stay consistent, and exploration adds recovery steps."""
import re

import numpy as np
import pytest

from agents.augment import RenamedWorld, TextCraftRenamer, make_augmenter
from agents.envs import get_env_spec
from agents.prompts import PromptSettings, make_prompter
from agents.sft import expert_examples
from fake_env import FakeCraftEnv

PROMPT = ("Crafting commands:\ncraft 4 dark oak planks using 1 dark oak log\n"
          "craft 4 oak planks using 1 oak log\n"
          "\nGoal: craft dark oak planks.\n"
          "[Observation 1: 'Crafted 4 minecraft:oak_planks', Action 1: 'get 1 oak log']")
RESPONSE = "<action>get 1 dark oak log</action><|im_end|>"


def test_renaming_is_consistent_between_prompt_and_answer_and_across_forms():
    rename = make_augmenter("textcraft")
    p, r = rename(np.random.default_rng(0), PROMPT, RESPONSE)
    new_log = re.fullmatch(r"<action>get 1 (.+)</action><\|im_end\|>", r).group(1)
    assert new_log != "dark oak log"
    lines = p.splitlines()
    goal = re.fullmatch(r"Goal: craft (.+)\.", lines[4]).group(1)
    assert lines[1] == f"craft 4 {goal} using 1 {new_log}"          # the goal's line names the answer's item
    other = re.fullmatch(r"craft 4 (.+) using 1 (.+)", lines[2])
    assert len({goal, new_log, other.group(1), other.group(2)}) == 4  # distinct names stay distinct
    assert f"minecraft:{other.group(1).replace(' ', '_')}'" in p       # the underscored form follows
    assert f"Action 1: 'get 1 {other.group(2)}'" in p
    assert p.count("Goal: craft") == 1 and "Crafting commands:" in p


def test_renaming_leaves_text_without_items_alone_and_is_seeded():
    rename = make_augmenter("textcraft")
    assert rename(np.random.default_rng(0), "Inventory: You are not carrying anything.",
                  "<action>inventory</action>") \
        == ("Inventory: You are not carrying anything.", "<action>inventory</action>")
    same_seed = [rename(np.random.default_rng(3), PROMPT, RESPONSE) for _ in range(2)]
    assert same_seed[0] == same_seed[1]


def test_held_out_names_are_never_drawn():
    rename = TextCraftRenamer(exclude=["minecraft:oak_planks", "stick"])
    assert "oak planks" not in rename.pool and "stick" not in rename.pool
    rng = np.random.default_rng(0)
    drawn = set()
    for _ in range(300):
        p, r = rename(rng, "craft 4 stick using 2 oak planks", "<action>get 2 oak planks</action>")
        made, used = re.fullmatch(r"craft 4 (.+) using 2 (.+)", p).groups()
        assert r == f"<action>get 2 {used}</action>"
        drawn |= {made, used}
    assert len(drawn) > 100 and not drawn & {"stick", "oak planks"}


def test_unknown_env_has_no_augmenter():
    with pytest.raises(ValueError, match="no renaming augmentation"):
        make_augmenter("webshop")


def test_exploration_adds_detours_that_are_not_targets(tiny):
    _, tok = tiny
    spec = get_env_spec("textcraft")
    prompter = make_prompter("textcraft", PromptSettings(require_think=False, history_length=2))
    plain = expert_examples(spec, lambda: FakeCraftEnv(max_steps=6), list(range(8)), prompter, tok,
                            max_steps=6)
    explored = expert_examples(spec, lambda: FakeCraftEnv(max_steps=6), list(range(8)), prompter, tok,
                               max_steps=6,
                               seed=1, explore=0.5)
    detoured = [e for e in explored if "Action 1: '" in e.prompt and e not in plain]
    assert detoured, "exploration should put some non-expert actions into the history"
    # every target is still an expert action of the fake env (get the ingredient, craft)
    for e in explored:
        assert re.fullmatch(r"<action>(get 1 .+|craft 1 .+ using 1 .+)</action><\|im_end\|>", e.response)
    with pytest.raises(ValueError, match="explore"):
        expert_examples(spec, lambda: FakeCraftEnv(), [0], prompter, tok, max_steps=2, explore=1.0)


def _textcraft():
    spec = get_env_spec("textcraft")
    env = spec.make(max_steps=8, preset="agentgym", depths=(1, 2))
    return spec, env, spec.tasks(env, "train"), spec.tasks(env, "test")


def test_renamed_world_is_won_by_the_renamed_expert_and_hides_the_real_names():
    spec, env, train, held_out = _textcraft()
    renamer = TextCraftRenamer(exclude=held_out)
    world = RenamedWorld(env, renamer, rate=1.0)
    for task in train[:12]:
        obs, info = world.reset(seed=5, options={"task_id": task})
        real_goal = env.unwrapped._info()["goal"]
        assert info["renamed"] and info["goal"] != real_goal
        assert f"Goal: craft {info['goal']}." in obs and f"Goal: craft {real_goal}." not in obs
        assert info["anchor"] == env.unwrapped._info()["anchor"]     # grouping keys stay the real state's
        for _ in range(8):
            real_action = spec.expert(env)[0]
            shown = renamer.apply(real_action, world._fwd)            # what a reading policy would answer
            assert shown in info["admissible_actions"]
            obs, reward, terminated, truncated, info = world.step(shown)
            assert info["action_succeeded"], (task, shown, obs)
            if terminated or truncated:
                break
        assert info["won"] and reward == 1.0, task


def test_renamed_world_is_seeded_per_reset_never_uses_held_out_names_and_rate_zero_is_the_plain_env():
    spec, env, train, held_out = _textcraft()
    renamer = TextCraftRenamer(exclude=held_out)
    world = RenamedWorld(env, renamer, rate=1.0)
    first = world.reset(seed=11, options={"task_id": train[0]})[0]
    other = world.reset(seed=12, options={"task_id": train[0]})[0]
    # a group shares its world
    assert world.reset(seed=11, options={"task_id": train[0]})[0] == first != other
    names = {n.replace("minecraft:", "").replace("_", " ") for n in held_out}
    for seed in range(40):
        world.reset(seed=seed, options={"task_id": train[seed % len(train)]})
        assert not names & {new for old, new in world._fwd.items() if old != new}
        assert sorted(world._fwd) == sorted(world._fwd.values())                      # a bijection
    plain = RenamedWorld(env, renamer, rate=0.0)
    obs, info = plain.reset(seed=11, options={"task_id": train[0]})
    assert not info["renamed"] and obs == env.reset(seed=11, options={"task_id": train[0]})[0]
    half = RenamedWorld(env, renamer, rate=0.5)
    share = np.mean([half.reset(seed=s, options={"task_id": train[0]})[1]["renamed"] for s in range(200)])
    assert 0.35 < share < 0.65
    with pytest.raises(ValueError, match="rename rate"):
        RenamedWorld(env, renamer, rate=1.5)


def test_trainer_renames_training_rollouts_only(tmp_path):
    from agents.config import TrainConfig
    from agents.trainer import Trainer
    env_kwargs = '{"preset": "agentgym", "depths": [1, 2]}'
    cfg = TrainConfig(env="textcraft", env_kwargs=env_kwargs, model="tiny", out_dir=str(tmp_path),
                      rl_rename=1.0,
                      batch_tasks=2, group_size=2, max_steps=1, max_new_tokens=4, eval_tasks=2, eval_batch=2,
                      tensorboard=False, progress=False)
    tr = Trainer(cfg)
    world = tr.collector("train").envs.envs[0].env
    assert isinstance(world, RenamedWorld) and world.rate == 1.0
    assert not {t.replace("_", " ") for t in tr.eval_tasks} & set(world.renamer.pool)
    assert not isinstance(tr.collector("eval").envs.envs[0].env, RenamedWorld)

    def goal(text):
        return re.search(r"Goal: craft (.+?)\.", text).group(1)

    ro, _ = tr.rollout(1)       # max_steps 1: one row per episode, acted on the reset state
    assert len(ro.prompt_ids) == 4 and ro.renamed.all()
    for prompt, anchor in zip(ro.prompt_ids, ro.batch.anchor):
        assert goal(tr.tok.decode(prompt)) != goal(str(anchor))       # the anchor keeps the real state
    ev = tr.collector("eval").collect(tr.eval_tasks[:2], [0, 0], [0, 1])
    assert not ev.renamed.any()
    for prompt, anchor in zip(ev.prompt_ids, ev.batch.anchor):
        assert goal(tr.tok.decode(prompt)) == goal(str(anchor))
    m = tr.iteration(1)     # success is logged per kind of world; with rate 1 there is no plain episode
    assert m["success_renamed"] == m["success"] and np.isnan(m["success_plain"])
    with pytest.raises(ValueError, match="rl_rename"):
        Trainer(TrainConfig(**{**cfg.__dict__, "rl_rename": -0.1}))
