"""The expert: wins every one of the 544 goals within the step limit, replans from any
inventory, and is never beaten by an exhaustive breadth-first search on short tasks."""
from __future__ import annotations

import random

import gymnasium as gym
import pytest

import bipace_envs  # noqa: F401
from bipace_envs.textcraft import expert_actions
from bipace_envs.textcraft.engine import Crafter, goal_tree
from bipace_envs.textcraft.tasks import task_id_of


def test_expert_crafts_every_goal_within_the_step_limit(all_goals):
    env = gym.make("bipace/TextCraft-v0", preset="agentgym", max_steps=50)
    assert len(all_goals) == 544
    for goal in all_goals:
        obs, info = env.reset(options={"task_id": task_id_of(goal)})
        plan = env.unwrapped.expert_actions()
        assert plan == expert_actions(env.unwrapped.state)
        term = trunc = False
        for action in plan:
            assert not (term or trunc), goal
            obs, reward, term, trunc, info = env.step(action)
        assert term and reward == 1.0 and info["won"] and not trunc, (goal, plan, obs)


def test_expert_replans_from_a_messy_inventory(all_goals):
    """After random useful commands (wrong gets, side crafts, failures) the remaining plan still wins
    and is never longer than the plan from an empty inventory."""
    rng = random.Random(7)
    env = gym.make("bipace/TextCraft-v0", preset="agentgym", max_steps=200, expert_in_info=True).unwrapped
    for goal in rng.sample(list(all_goals), 60):
        obs, info = env.reset(options={"task_id": task_id_of(goal)})
        fresh = len(env.expert_actions())
        for _ in range(rng.randrange(1, 15)):
            obs, reward, term, trunc, info = env.step(rng.choice(info["useful_commands"]))
            if term:
                break
        if term:
            continue
        plan = env.expert_actions()
        assert plan[0] == info["expert_action"]
        assert len(plan) <= fresh       # items only help
        for action in plan:
            obs, reward, term, trunc, info = env.step(action)
            assert info["action_succeeded"], (goal, action, obs)
        assert term and info["won"]


def _shortest_by_search(book, goal, admissible, limit):
    """Length of the shortest winning sequence up to ``limit`` commands (None if longer):
    breadth-first over inventories, with every craft the env accepts for this tree and an
    ample ``get`` of every base item (amounts never cost extra commands)."""
    bases = {g.item for r in goal_tree(book, goal).recipes for g in r.inputs
             if g.item is not None and not book.is_craftable(g.item)}
    actions = [f"get 64 {b.replace('minecraft:', '').replace('_', ' ')}" for b in sorted(bases)]
    actions += [a for a in admissible if a.startswith("craft ")]
    frontier, seen = [()], {()}
    for depth in range(1, limit + 1):
        nxt = []
        for state in frontier:
            for action in actions:
                game = Crafter(book, goal)
                game.inventory = dict(state)
                out = game.execute(action)
                if not out.succeeded:
                    continue
                if out.crafted and out.item == goal:
                    return depth
                key = tuple(sorted(game.inventory.items()))
                if key not in seen:
                    seen.add(key)
                    nxt.append(key)
        frontier = nxt
    return None


def _check_shortest(book, goals, max_len):
    env = gym.make("bipace/TextCraft-v0", preset="agentgym").unwrapped
    checked = 0
    for goal in goals:
        obs, info = env.reset(options={"task_id": task_id_of(goal)})
        plan = env.expert_actions()
        if len(plan) > max_len:
            continue
        assert _shortest_by_search(book, goal, info["useful_commands"], len(plan)) == len(plan), goal
        checked += 1
    return checked


def test_expert_plans_are_shortest_on_short_tasks(book, all_goals):
    assert _check_shortest(book, all_goals[::3], 4) >= 60


@pytest.mark.slow
def test_expert_plans_are_shortest_on_all_tasks_up_to_5_commands(book, all_goals):
    assert _check_shortest(book, all_goals, 5) >= 300
