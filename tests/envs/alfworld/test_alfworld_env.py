"""ALFWorldEnv contract: check_env, seeding, errors, fuzzing, truncation, game reuse, vector envs."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import bipace_envs  # noqa: F401  (registers bipace/ALFWorld-v0)
from bipace_envs.alfworld.env import ALFWorldEnv
from bipace_envs.common import obs_hash

CONTRACT_KEYS = {"admissible_actions", "task_id", "won", "anchor", "obs_hash"}


@pytest.fixture(scope="module")
def real_env(alfworld_data):
    return ALFWorldEnv(data_dir=alfworld_data, split="valid_unseen")


@pytest.fixture(scope="module")
def gen_env(gen_cache):
    return ALFWorldEnv(split="test", games_per_task=1, cache_dir=gen_cache)


def test_check_env_real_and_generated(real_env, gen_env):
    check_env(real_env, skip_render_check=True)
    check_env(gen_env, skip_render_check=True)


def test_gym_make_and_contract_keys(alfworld_data):
    env = gym.make("bipace/ALFWorld-v0", data_dir=str(alfworld_data), split="valid_seen", max_steps=7)
    obs, info = env.reset(seed=3)
    assert CONTRACT_KEYS <= set(info) and info["anchor"] == obs and info["obs_hash"] == obs_hash(obs)
    assert "Your task is to:" in obs and obs.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert info["task_id"].startswith("valid_seen/")
    assert "help" not in info["admissible_actions"] and "look" in info["admissible_actions"]
    obs, r, term, trunc, info = env.step(info["admissible_actions"][0])
    assert CONTRACT_KEYS | {"action_valid"} <= set(info) and info["action_valid"] is True
    assert env.spec.max_episode_steps is None and env.unwrapped.max_steps == 7


def test_same_seed_same_game_and_episode(real_env, alfworld_data):
    other = ALFWorldEnv(data_dir=alfworld_data, split="valid_unseen", expert=True)
    runs = []
    for env in (real_env, other, other):
        obs, info = env.reset(seed=11, options={"expert": True})
        trace = [(info["task_id"], obs, tuple(info["admissible_actions"]))]
        for _ in range(6):
            action = info["expert_action"]
            obs, r, term, trunc, info = env.step(action)
            trace.append((action, obs, tuple(info["admissible_actions"]), r, info["goal_condition_success"]))
            if term:
                break
        runs.append(trace)
    assert runs[0] == runs[1] == runs[2]
    # A group of G rollouts shares the seed, hence the game; other seeds spread over the split.
    ids = {real_env.reset(seed=s)[1]["task_id"] for s in range(8)}
    assert len(ids) > 4


def test_task_type_filter_and_task_id_option(alfworld_data):
    env = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", task_types=[2, "pick_two_obj_and_place"])
    types = {t.split("/")[1].split("-")[0] for t in env.task_ids}
    assert types == {"look_at_obj_in_light", "pick_two_obj_and_place"} and len(env.task_ids) == 13 + 24
    tid = env.task_ids[5]
    obs, info = env.reset(options={"task_id": tid})
    assert info["task_id"] == tid
    with pytest.raises(ValueError, match="unknown ALFWorld task_id"):
        env.reset(options={"task_id": "valid_seen/nope/trial_0"})
    with pytest.raises(ValueError, match="unknown reset options"):
        env.reset(options={"taskid": tid})
    with pytest.raises(ValueError, match="unknown ALFWorld task type"):
        ALFWorldEnv(data_dir=alfworld_data, task_types=["make_coffee"])


def test_real_games_per_task_is_a_fixed_subset_spread_over_each_type(alfworld_data):
    full = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen").task_ids
    sub = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", games_per_task=4).task_ids
    again = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", games_per_task=4).task_ids
    assert sub == again and set(sub) <= set(full)

    def of_type(ids, t):
        return [x for x in ids if x.split("/")[1].startswith(t)]
    for t in ("look_at_obj_in_light", "pick_two_obj_and_place"):
        chosen, every = of_type(sub, t), of_type(full, t)
        assert len(chosen) == 4
        assert chosen != every[:4] and chosen[0] == every[0]        # spread, not the alphabetically first
        assert every.index(chosen[-1]) >= len(every) // 2
    everything = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", games_per_task=100).task_ids
    assert len(everything) == len(full)
    with pytest.raises(ValueError, match="games_per_task must be >= 1"):
        ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", games_per_task=0)


def test_a_game_that_fails_to_load_names_its_file_and_the_reason(alfworld_data, tmp_path):
    import json
    import shutil
    from bipace_envs.alfworld.env import GameLoadError
    trial = sorted((alfworld_data / "json_2.1.1" / "valid_seen").glob("*/*/game.tw-pddl"))[0].parent
    copy = tmp_path / "json_2.1.1" / "valid_seen" / trial.parent.name / trial.name
    shutil.copytree(trial, copy)
    game = json.loads((copy / "game.tw-pddl").read_text())
    game["pddl_problem"] = game["pddl_problem"][:200] + " (broken"
    (copy / "game.tw-pddl").write_text(json.dumps(game))
    env = ALFWorldEnv(data_dir=tmp_path, split="valid_seen")
    with pytest.raises(GameLoadError, match=r"game\.tw-pddl \(task .*\) failed to load: ParseError"):
        env.reset(seed=0)
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("look")


def test_missing_or_empty_data_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="json_2.1.1"):
        ALFWorldEnv(data_dir=tmp_path / "nowhere")
    (tmp_path / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"no playable ALFWorld games in .*valid_seen"):
        ALFWorldEnv(data_dir=tmp_path, split="valid_seen")
    with pytest.raises(ValueError, match="unknown split"):
        ALFWorldEnv(data_dir=tmp_path, split="dev")
    with pytest.raises(ValueError, match="generated games"):
        ALFWorldEnv(split="dev")


def test_bad_actions_and_call_order(alfworld_data):
    env = ALFWorldEnv(data_dir=alfworld_data, split="valid_unseen")
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("look")
    obs0, info0 = env.reset(seed=0)
    with pytest.raises(TypeError, match="str commands"):
        env.step(3)
    obs, r, term, trunc, info = env.step("")
    assert obs == "Nothing happens." and info["action_valid"] is False and r == 0.0
    assert info["admissible_actions"] == info0["admissible_actions"]
    obs, r, term, trunc, info = env.step("help")  # not listed, but the engine accepts it
    assert info["action_valid"] is True and "help" not in info["admissible_actions"]


def test_truncation_at_max_steps(alfworld_data):
    env = ALFWorldEnv(data_dir=alfworld_data, split="valid_unseen", max_steps=3)
    env.reset(seed=1)
    flags = [env.step("look")[3] for _ in range(3)]
    assert flags == [False, False, True]
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("look")


def test_fuzzed_actions_never_raise(alfworld_data):
    """10,000 fuzzed strings (garbage, unicode, huge, near-miss commands), with a valid move every
    100 steps so they hit many different states."""
    real_env = ALFWorldEnv(data_dir=alfworld_data, split="valid_unseen", max_steps=20_000)
    rng = np.random.default_rng(0)
    obs, info = real_env.reset(seed=2)
    alphabet = list("abcdefghijklmnopqrstuvwxyz 0123456789\t\n.,!?-_'\"é漢🙂\x00")
    nothing = 0
    for i in range(10_000):
        kind = i % 10 if i % 100 else 0
        adm = info["admissible_actions"]
        if i % 100 == 0:
            action = str(rng.choice(adm))  # keep the state moving
        elif kind in (0, 1):
            a = str(rng.choice(adm))
            j = int(rng.integers(len(a)))
            action = a[:j] + a[j + 1:]  # near miss
        elif kind == 2:
            action = "x" * int(rng.integers(1000, 100_000))
        elif kind == 3:
            action = str(rng.choice(adm)).upper()
        else:
            action = "".join(rng.choice(alphabet, size=int(rng.integers(0, 40))))
        obs, r, term, trunc, info = real_env.step(action)
        assert isinstance(obs, str) and isinstance(info["admissible_actions"], list)
        if not info["action_valid"]:
            assert obs == "Nothing happens."
            nothing += 1
        if term or trunc:
            obs, info = real_env.reset()
    assert nothing > 8000


def test_reset_does_not_reparse_loaded_games(real_env):
    a, b = real_env.task_ids[0], real_env.task_ids[40]
    first = [real_env.reset(options={"task_id": t})[0] for t in (a, b)]
    engine = real_env._engine
    loads = engine.loads
    again = [real_env.reset(options={"task_id": t})[0] for t in (a, b, a, b)]
    assert engine.loads == loads  # switching between loaded games and resetting them parses nothing
    assert again == first * 2


def test_expert_toggle(real_env):
    obs, info = real_env.reset(seed=4)
    assert "expert_action" not in info
    with pytest.raises(RuntimeError, match="expert is off"):
        real_env.expert_action()
    obs, info = real_env.reset(seed=4, options={"expert": True})
    assert info["expert_action"] == real_env.expert_action() and isinstance(info["expert_action"], str)


def test_async_vector_env(alfworld_data):
    envs = gym.vector.AsyncVectorEnv(
        [lambda: gym.make("bipace/ALFWorld-v0", data_dir=str(alfworld_data), split="valid_seen")] * 2,
        shared_memory=False)
    try:
        obs, infos = envs.reset(seed=[5, 5])
        assert obs[0] == obs[1] and infos["task_id"][0] == infos["task_id"][1]
        actions = [infos["admissible_actions"][0][0], "jump around"]
        obs, r, term, trunc, infos = envs.step(actions)
        assert obs[1] == "Nothing happens." and list(infos["action_valid"]) == [True, False]
    finally:
        envs.close()


def test_planner_timeout_forks_and_gives_up_cleanly(alfworld_data):
    """With a timeout the planner runs in a forked child: a generous limit gives the in-process plan,
    a tiny one gives no action (and says so) instead of blocking the episode."""
    import time
    free = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", task_types=[1], expert=True,
                       expert_mode="planner")
    limited = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", task_types=[1], expert=True,
                          expert_mode="planner", planner_timeout=60)
    tiny = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", task_types=[1], expert=True,
                       expert_mode="planner", planner_timeout=1e-4)
    task = free.task_ids[0]
    _, a = free.reset(seed=0, options={"task_id": task})
    _, b = limited.reset(seed=0, options={"task_id": task})
    assert a["expert_action"] is not None and a["expert_action"] == b["expert_action"]
    assert not b["expert_timed_out"]
    t0 = time.perf_counter()
    _, c = tiny.reset(seed=0, options={"task_id": task})
    assert c["expert_action"] is None and c["expert_timed_out"]
    _, _, _, _, c = tiny.step("look")              # no second wait within the episode
    assert c["expert_action"] is None and time.perf_counter() - t0 < 5
    with pytest.raises(ValueError, match="planner_timeout must be > 0"):
        ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", planner_timeout=0)
