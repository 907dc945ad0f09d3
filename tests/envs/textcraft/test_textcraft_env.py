"""The gymnasium contract of bipace/TextCraft-v0: check_env, info keys, step limit, presets,
splits and depth filters, determinism across processes, an unchanged recipe table, bad input,
and the vector envs."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import bipace_envs  # noqa: F401
from bipace_envs.common import obs_hash
from bipace_envs.textcraft import list_tasks
from bipace_envs.textcraft.engine import Crafter
from bipace_envs.textcraft.recipes import load_book
from bipace_envs.textcraft.tasks import goal_pool

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KEYS = {"admissible_actions", "task_id", "won", "anchor", "obs_hash"}


def make(**kw):
    return gym.make("bipace/TextCraft-v0", **kw)


def test_check_env_passes():
    check_env(make().unwrapped, skip_render_check=True)
    check_env(make(preset="agentgym", split="test", render_mode="ansi").unwrapped)


def test_info_keys_and_values_on_reset_and_step():
    env = make()
    obs, info = env.reset(seed=5)
    assert KEYS <= set(info) and "action_valid" not in info
    assert info["anchor"] == obs and info["obs_hash"] == obs_hash(obs) and info["won"] is False
    assert obs.startswith("Crafting commands:\n") and obs.endswith(f"Goal: craft {info['goal']}.")
    assert all(isinstance(a, str) for a in info["admissible_actions"])
    assert "inventory" in info["admissible_actions"]
    obs, reward, term, trunc, info = env.step("inventory")
    assert KEYS | {"action_valid"} <= set(info)
    assert obs == "Inventory: You are not carrying anything." and info["action_valid"] is True
    assert info["anchor"] == obs and info["obs_hash"] == obs_hash(obs)
    obs, *_, info = env.step("dance")
    assert obs == "Could not execute dance" and info["action_valid"] is False


def test_admissible_actions_are_the_useful_commands_that_succeed_now():
    """Issue 18: an empty inventory cannot craft, so no craft is admissible at reset; once the
    ingredient is held the craft is; every admissible command succeeds, every other useful
    command fails, at each step of an expert episode with detours."""
    env = make(preset="agentgym").unwrapped
    obs, info = env.reset(seed=0, options={"task_id": "crafting_table"})
    assert "craft 4 oak planks using 1 oak logs" in info["useful_commands"]
    assert not any(a.startswith("craft ") for a in info["admissible_actions"])
    assert "get 1 oak logs" in info["admissible_actions"] and "inventory" in info["admissible_actions"]
    info = env.step("get 1 oak logs")[-1]
    assert "craft 4 oak planks using 1 oak logs" in info["admissible_actions"]
    book = load_book()
    for task in ("crafting_table", "textcraft_300", "textcraft_500"):
        obs, info = env.reset(seed=1, options={"task_id": task})
        plan = ["get 3 oak logs"] + env.expert_actions()
        for action in plan:
            for command in info["useful_commands"]:
                game = Crafter(book, env.goal)
                game.inventory = env.inventory
                assert game.execute(command).succeeded == (command in info["admissible_actions"]), command
            obs, reward, term, trunc, info = env.step(action)
        assert info["won"]


def test_useful_commands_list_the_shown_lines_the_tree_gets_and_inventory():
    env = make().unwrapped
    obs, info = env.reset(seed=0)
    shown = obs.split("\n\n")[0].split("\n")[1:]
    adm = info["useful_commands"]
    assert set(shown) <= set(adm)
    assert [a for a in env.expert_actions() if a.startswith("get ")] == \
        [a for a in adm if a in env.expert_actions() and a.startswith("get ")]
    for a in adm:      # every get in the list fetches something
        if a.startswith("get "):
            env.reset(seed=0)
            assert env.step(a)[0].startswith("Got ")


def test_expert_wins_and_reward_is_one():
    env = make(split="test")
    obs, info = env.reset(seed=3)
    plan = env.unwrapped.expert_actions()
    for i, a in enumerate(plan):
        obs, reward, term, trunc, info = env.step(a)
        assert info["action_succeeded"]
        assert term == (i == len(plan) - 1) and reward == float(term) and not trunc
    assert info["won"] and obs.startswith("Crafted 1 minecraft:")


def test_step_limit_truncates():
    env = make(max_steps=3)
    env.reset(seed=1)
    flags = [env.step("inventory")[3] for _ in range(3)]
    assert flags == [False, False, True]


def test_same_seed_same_episode_and_seed_picks_the_goal():
    env = make(preset="adapt").unwrapped
    pool = goal_pool("adapt")
    a = env.reset(seed=7)[0]
    assert env.goal == pool[7] and env.reset(seed=7)[0] == a
    env.reset(seed=7 + len(pool))
    assert env.goal == pool[7]
    env.reset(seed=7, options={"task_id": "stick"})
    assert env.goal == "minecraft:stick"


def test_agentgym_layout_depends_on_the_task_only():
    env = make(preset="agentgym").unwrapped
    a = env.reset(seed=1, options={"task_id": "textcraft_200"})[0]
    b = env.reset(seed=2, options={"task_id": "textcraft_200"})[0]
    assert a == b
    env = make(preset="agentgym", layout_seed=None).unwrapped
    outs = {env.reset(seed=s, options={"task_id": "textcraft_400"})[0] for s in range(5)}
    assert len(outs) > 1


@pytest.mark.parametrize("preset", ["adapt", "agentgym"])
def test_splits_are_disjoint_and_sized(preset):
    train, test, full = (set(list_tasks(preset, s, depths=(1, 2, 3, 4))) for s in ("train", "test", "all"))
    assert not train & test and train | test <= full and len(full) == 544
    if preset == "agentgym":
        assert (len(train), len(test)) == (374, 100)
    else:
        assert len(test) == 200 and train | test == full


def test_adapt_test_split_is_adapts_recorded_seed_to_goal_list(shared_dir):
    """Seeds 0-199 play the goal ADaPT's own runs recorded for them (test and all splits);
    train is the other 197 goals of depth >= 2."""
    import json
    rows = json.loads((shared_dir / "data" / "textcraft" / "adapt_test_goals.json").read_text())
    recorded = [r["goal"] for r in sorted(rows, key=lambda r: r["seed"])]
    assert len(recorded) == 200
    for split in ("test", "all"):
        env = make(preset="adapt", split=split).unwrapped
        played = [env.reset(seed=s)[1]["goal"] for s in range(200)]
        assert played == recorded, split
    assert [t.replace("_", " ") for t in list_tasks("adapt", "test")] == recorded
    book = load_book()
    train = list_tasks("adapt", "train")
    assert len(train) == 197 and not set(train) & {g.replace(" ", "_") for g in recorded}
    deep = {g for g in book.goal_order if book.depth[g] >= 2}
    assert {"minecraft:" + t for t in train} | {"minecraft:" + g.replace(" ", "_") for g in recorded} == deep


def test_depth_filter_and_orders():
    book = load_book()
    for depths in [(2, 3), (1, 2), (4,)]:
        ids = list_tasks("adapt", "all", depths=depths)
        assert {book.depth["minecraft:" + t] for t in ids} == set(depths)
    adapt = [book.depth["minecraft:" + t] for t in list_tasks("adapt")]
    gym_ = [book.depth["minecraft:" + t] for t in list_tasks("agentgym")]
    assert adapt == sorted(adapt, reverse=True) and min(adapt) == 2 and len(adapt) == 397
    assert gym_ == sorted(gym_) and min(gym_) == 1
    test = [book.depth["minecraft:" + t] for t in list_tasks("adapt", "test")]
    assert sum(d >= 3 for d in test) == 123 and sum(d == 2 for d in test) == 77
    env = make(depths=(1, 2)).unwrapped
    for seed in range(30):
        env.reset(seed=seed)
        assert book.depth[env.goal] in (1, 2)


def test_500_resets_leave_the_recipe_table_unchanged():
    env = make(preset="agentgym", layout_seed=None).unwrapped
    before = env.book.fingerprint()
    for seed in range(500):
        env.reset(seed=seed, options={"task_id": f"textcraft_{(seed * 37) % 544}"})
        for a in env.expert_actions()[:3]:
            env.step(a)
    assert env.book.fingerprint() == before
    from bipace_envs.textcraft.recipes import build_book, recipe_dir
    import json
    root = recipe_dir()
    fresh = build_book([(n, json.loads((root / n).read_text())) for n in env.book.files])
    assert fresh.fingerprint() == before


EPISODE_SCRIPT = textwrap.dedent("""
    import hashlib, random, gymnasium as gym, bipace_envs
    env = gym.make("bipace/TextCraft-v0", preset="adapt", depths=(1, 2, 3, 4)).unwrapped
    h = hashlib.sha1()
    for seed in (0, 5, 123, 4321):
        obs, info = env.reset(seed=seed)
        rng = random.Random(seed)
        h.update(repr((obs, info)).encode())
        acts = info["admissible_actions"]      # gets and inventory: none ends the episode
        for a in rng.sample(acts, min(5, len(acts))):
            h.update(repr(env.step(a)).encode())
        for a in env.expert_actions():            # the plan from there, to the win
            h.update(repr(env.step(a)).encode())
    env.reset(seed=9)
    for _ in range(3):
        h.update(repr(env.reset()).encode())
    print(h.hexdigest())
""")


def test_identical_episodes_in_processes_with_different_hash_seeds():
    outs = set()
    for hash_seed in ("0", "1", "12345"):
        res = subprocess.run([sys.executable, "-c", EPISODE_SCRIPT], capture_output=True, text=True, cwd=REPO,
                             env=dict(os.environ, PYTHONHASHSEED=hash_seed), check=True)
        outs.add(res.stdout.strip())
    assert len(outs) == 1


def test_bad_input_gets_clear_errors():
    with pytest.raises(ValueError, match="preset"):
        make(preset="minecraft")
    with pytest.raises(ValueError, match="split"):
        make(split="dev")
    with pytest.raises(ValueError, match="depths"):
        make(depths=(7,))
    with pytest.raises(ValueError, match="max_steps"):
        make(max_steps=0)
    with pytest.raises(TypeError, match="unknown arguments"):
        make(max_step=5)
    env = make().unwrapped
    with pytest.raises(RuntimeError, match="reset"):
        env.step("inventory")
    with pytest.raises(ValueError, match="list_tasks"):
        env.reset(options={"task_id": "diamond_sword_of_doom"})
    with pytest.raises(ValueError, match="data_idx"):
        env.reset(options={"task_id": "textcraft_9999"})
    with pytest.raises(ValueError, match="task_id"):
        env.reset(options={"task": "stick"})
    env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(b"inventory")
    with pytest.raises(TypeError, match="str"):
        env.step(3)


@pytest.mark.parametrize("vector", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv])
def test_vector_envs(vector):
    """AsyncVectorEnv needs shared_memory=False: gymnasium's shared memory stores a Text space
    as indices into its (alphanumeric) charset, which cannot hold arbitrary observations."""
    fns = [lambda: gym.make("bipace/TextCraft-v0", split="test", depths=(2, 3), expert_in_info=True)] * 2
    envs = vector(fns) if vector is gym.vector.SyncVectorEnv else vector(fns, shared_memory=False)
    try:
        obs, info = envs.reset(seed=[0, 1])
        single = make(split="test", depths=(2, 3)).unwrapped
        assert obs[1] == single.reset(seed=1)[0]
        won = [False, False]
        for _ in range(40):
            actions = tuple(str(a) for a in info["expert_action"])
            obs, reward, term, trunc, info = envs.step(actions)
            assert len(info["admissible_actions"]) == 2
            assert set(info["task_id"]) <= set(list_tasks("adapt", "test"))
            won = [w or bool(t) for w, t in zip(won, term)]
            if all(won):
                break
        assert all(won)
    finally:
        envs.close()
