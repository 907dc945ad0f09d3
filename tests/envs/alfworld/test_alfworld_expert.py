"""The expert wins real and generated games through the env; goal-condition scores track progress.

A sample runs by default; ``-m slow`` runs every real validation game (274) and 100 generated games per
task type (600), the figures reported by ``benchmarks/speed/alfworld_expert_sweep.py``.
"""
from __future__ import annotations

from collections import Counter

import pytest

from bipace_envs.alfworld.env import ALFWorldEnv
from bipace_envs.alfworld.games import TASK_TYPES

README_COUNTS = {  # ../shared/data/alfworld/README.md
    "valid_seen": dict(look_at_obj_in_light=13, pick_and_place_simple=35, pick_clean_then_place_in_recep=27,
                       pick_heat_then_place_in_recep=16, pick_cool_then_place_in_recep=25,
                       pick_two_obj_and_place=24),
    "valid_unseen": dict(look_at_obj_in_light=18, pick_and_place_simple=24, pick_clean_then_place_in_recep=31,
                         pick_heat_then_place_in_recep=23, pick_cool_then_place_in_recep=21,
                         pick_two_obj_and_place=17),
}


def play_expert(env, task_id, max_steps=150):
    """Expert episode: (won, steps, goal-condition trace, rewards)."""
    obs, info = env.reset(seed=0, options={"task_id": task_id, "expert": True})
    gcs, rewards = [info["goal_condition_success"]], []
    won = info["won"]
    while not won and len(rewards) < max_steps:
        action = info["expert_action"]
        assert action in info["admissible_actions"], action
        obs, r, won, trunc, info = env.step(action)
        gcs.append(info["goal_condition_success"])
        rewards.append(r)
    return won, len(rewards), gcs, rewards


def one_per_task_type(task_ids, key):
    seen, out = set(), []
    for t in task_ids:
        if key(t) not in seen:
            seen.add(key(t))
            out.append(t)
    return out


@pytest.mark.parametrize("split", ["valid_seen", "valid_unseen"])
def test_real_split_counts(alfworld_data, split):
    env = ALFWorldEnv(data_dir=alfworld_data, split=split)
    counts = Counter(t.split("/")[1].split("-")[0] for t in env.task_ids)
    assert counts == README_COUNTS[split]


def test_expert_wins_real_sample(alfworld_data):
    env = ALFWorldEnv(data_dir=alfworld_data, split="valid_unseen", max_steps=151)
    # One game per task type, taken from the middle of each task's block of trials.
    sample = one_per_task_type(env.task_ids[7::9], key=lambda t: t.split("/")[1].split("-")[0])
    assert len(sample) == 6
    for tid in sample:
        won, steps, gcs, rewards = play_expert(env, tid)
        assert won, tid
        assert gcs[-1] == 1.0 and max(gcs[:-1]) < 1.0 and rewards[-1] == 1.0 and sum(rewards) == 1.0


def test_goal_conditions_count_partial_progress(alfworld_data):
    """pick_two: placing the first object is half the goal, the second one wins."""
    env = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", task_types=["pick_two_obj_and_place"],
                      max_steps=151)
    won, steps, gcs, _ = play_expert(env, env.task_ids[0])
    assert won and sorted(set(gcs)) == [0.0, 0.5, 1.0]


def test_expert_wins_generated_sample(gen_cache):
    env = ALFWorldEnv(split="test", games_per_task=1, cache_dir=gen_cache, max_steps=151)
    assert len(env.task_ids) == 6
    for tid in env.task_ids:
        won, steps, gcs, rewards = play_expert(env, tid)
        assert won, tid
        assert gcs[-1] == 1.0 and gcs[0] < 1.0


@pytest.mark.slow
@pytest.mark.parametrize("split", ["valid_seen", "valid_unseen"])
def test_expert_wins_every_real_game(alfworld_data, split):
    env = ALFWorldEnv(data_dir=alfworld_data, split=split, max_steps=151)
    lost = [tid for tid in env.task_ids if not play_expert(env, tid)[0]]
    assert lost == [] and len(env.task_ids) == sum(README_COUNTS[split].values())


@pytest.mark.slow
@pytest.mark.parametrize("task_type", list(TASK_TYPES.values()))
def test_expert_wins_100_generated_games_per_task(tmp_path_factory, task_type):
    cache = tmp_path_factory.getbasetemp() / "alfworld-gen-100"
    env = ALFWorldEnv(split="train", task_types=[task_type], games_per_task=100, cache_dir=cache,
                      max_steps=151)
    lost = [tid for tid in env.task_ids if not play_expert(env, tid)[0]]
    assert lost == []


def test_replans_of_a_state_are_kept_and_equal_a_fresh_search(alfworld_data, monkeypatch):
    """Fast Downward's answer per (game, state facts) is kept: a replay passing the same state again
    does not search again, gets the plan a fresh search gives, and a timeout is reused only under a
    limit no longer than the one it hit."""
    import random
    env = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", max_steps=30, expert_mode="planner")
    env.reset(seed=0, options={"task_id": env.task_ids[0], "expert": True})
    engine = env.unwrapped._engine
    rng = random.Random(0)
    _, _, _, _, info = env.step("look")
    for _ in range(2):                                   # somewhere off the walkthrough
        _, _, _, _, info = env.step(rng.choice(info["admissible_actions"]))
    calls = []
    fresh = engine._replan(None)
    monkeypatch.setattr(engine, "_replan", lambda t: calls.append(t) or ["searched"])
    assert engine.replan(None) == fresh and calls == []          # the state was planned during play
    env.step(info["admissible_actions"][0])
    engine._plans.clear()
    calls.clear()
    assert engine.replan(None) == ["searched"] and engine.replan(5.0) == ["searched"] and calls == [None]

    def times_out(t):
        calls.append(t)
        engine.timed_out = True
        return []
    monkeypatch.setattr(engine, "_replan", times_out)
    engine._plans.clear()
    calls.clear()
    assert engine.replan(5.0) == [] and engine.timed_out
    assert engine.replan(3.0) == [] and engine.timed_out and calls == [5.0]    # shorter limit: kept
    engine.replan(10.0)
    engine.replan(None)
    assert calls == [5.0, 10.0, None]                                         # longer or none: searched


class _NeverWins:
    """Stands in for alfworld's handcoded expert: tracks nothing and always suggests ``look``."""

    def __init__(self, max_steps):
        pass

    def reset(self, gamefile):
        pass

    def observe(self, feedback):
        pass

    def act(self, game_state, reward, won, last):
        return "look"


def test_handcoded_budget_counts_only_the_experts_own_steps(alfworld_data, monkeypatch):
    """Actions the agent chose itself do not use up the handcoded expert's budget (a scripted policy that
    acts at random half the time would otherwise hand every long episode to the planner); taking the
    expert's suggestion budget + 1 times without winning hands it over."""
    import alfworld.agents.expert as handcoded
    monkeypatch.setattr(handcoded, "HandCodedTWAgent", _NeverWins)
    env = ALFWorldEnv(data_dir=alfworld_data, split="valid_seen", max_steps=200, planner_timeout=60)
    engine_calls = []
    _, info = env.reset(seed=0, options={"task_id": env.task_ids[0], "expert": True})
    expert = env.unwrapped._expert
    monkeypatch.setattr(expert.engine, "replan", lambda t=None: engine_calls.append(t) or ["inventory"])
    for step in range(60):              # 60 of the agent's own choices, 10 of them the expert's "look"
        action = "look" if step % 6 == 0 else "inventory"
        assert info["expert_action"] == "look" and not info["expert_used_planner"], step
        _, _, _, _, info = env.step(action)
    for _ in range(expert.budget - 10):   # the expert's own suggestions up to its budget
        _, _, _, _, info = env.step(info["expert_action"])
    assert not info["expert_used_planner"] and engine_calls == []
    _, _, _, _, info = env.step(info["expert_action"])      # one more: over budget, not won
    assert info["expert_used_planner"] and info["expert_action"] == "inventory" and engine_calls == [60]
