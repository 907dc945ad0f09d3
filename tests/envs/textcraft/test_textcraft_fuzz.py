"""10,000 random and malformed commands: nothing raises, and every reply and the inventory
equal the reference's (the pinned reference engine is stepped with the same commands), except for
actions that break the rule all bipace envs share (multi-line or over ``MAX_ACTION_LENGTH``): those are
invalid here, unchanged state, while the reference would run their first line."""
from __future__ import annotations

import contextlib
import io
import random

import gymnasium as gym
import pytest

import bipace_envs  # noqa: F401
from bipace_envs.common import is_one_command
from bipace_envs.textcraft.engine import Crafter

FAILURES = ("Could not find ", "Could not find enough items to craft ", "Could not find a valid recipe for ",
            "Wrong item format: ", "Could not execute ")
UNICODE = ["é", "ß", "木", "🪵", "\u200b", "\u2028", "\x00", "\t", "\r", "Ω", "١"]


def _mutate(rng: random.Random, action: str) -> str:
    kind = rng.randrange(14)
    if kind == 0:
        return ""
    if kind == 1:
        return "".join(rng.choice(UNICODE + list("abc ,0123456789")) for _ in range(rng.randrange(1, 40)))
    if kind == 2:
        return action + "".join(rng.choice(UNICODE) for _ in range(3))
    if kind == 3:   # 10 kB strings: junk, or a huge item name / ingredient list
        return rng.choice(["x" * 10_000, "get 1 " + "oak " * 2_500,
                           "craft 1 stick using " + "1 oak planks, " * 700,
                           "inventory" + "!" * 10_000, "get " + "9" * 4_000 + " oak logs"])
    if kind == 4:   # wrong counts
        return __import__("re").sub(r"[0-9]+", lambda m: str(rng.choice([0, 1, 2, 3, 7, 64, 10**30])), action)
    if kind == 5:   # tags and unknown items
        return action.replace(action.split(" ")[-1],
                              rng.choice(["planks", "logs", "wool", "unobtainium", "stick"]))
    if kind == 6:
        return action.upper()
    if kind == 7:
        return " " + action
    if kind == 8:
        return action + "\nget 1 diamond"
    if kind == 9:
        return action.replace(" using ", " with ")
    if kind == 10:
        return action.replace(", ", ", , ")
    if kind == 11:
        return rng.choice(["get", "get 1", "get x oak logs", "get -1 oak logs", "craft", "craft using",
                           "craft 1 stick using", "craft 1 stick using ", "inventory please", "Inventory",
                           "get 1 minecraft:oak_logs", "craft 4 stick using 2 planks", "get 2 planks",
                           "get 1 gold block", "get 3 stick", "craft 1 using 1 oak planks"])
    if kind == 12:
        return action.replace(" ", "  ")
    return action


def test_10000_random_and_malformed_actions_match_the_reference(book, reference):
    rng = random.Random(1234)
    env = gym.make("bipace/TextCraft-v0", preset="agentgym", max_steps=10**6).unwrapped
    n = rejected = wins = 0
    sink = io.StringIO()       # the reference prints "Wrong Item Count for ..." to stdout
    while n < 10_000:          # episodes of up to 400 steps; a win ends one (a step after it would raise)
        seed = rng.randrange(10**6)
        env.reset(options={"task_id": f"textcraft_{rng.randrange(544)}"})
        reference.env.goal = env.goal
        reference.env.inventory = {}
        pool = env.expert_actions() + list(env._useful)
        for _ in range(min(400, 10_000 - n)):
            action = rng.choice(pool)
            if rng.random() < 0.5:
                action = _mutate(rng, action)
            n += 1
            if not is_one_command(action):
                held = env.inventory
                obs, reward, terminated, truncated, info = env.step(action)
                assert obs == f"Could not execute {action}" and not info["action_valid"]
                assert (reward, terminated, env.inventory) == (0.0, False, held)
                rejected += 1
                continue
            obs, reward, terminated, truncated, info = env.step(action)
            with contextlib.redirect_stdout(sink):
                ref_obs, ref_reward, ref_term, _, _ = reference.step(action)
            assert obs == ref_obs, (seed, action)
            assert (reward, terminated) == (ref_reward, ref_term)
            assert info["action_valid"] == (not obs.startswith(("Wrong item format: ", "Could not execute ")))
            if not info["action_succeeded"]:
                assert obs.startswith(FAILURES)
            if terminated:
                wins += 1
                break
        assert env.inventory == reference.inventory
    assert n == 10_000 and 300 < rejected < 2_000 and wins > 0


def test_counts_beyond_int_parsing_answer_instead_of_crashing(book, reference):
    """Over 4300 digits the reference raises ValueError; we answer 'Could not execute'."""
    huge = "9" * 5000
    for action in (f"get {huge} oak logs", f"craft {huge} stick using 2 oak planks",
                   f"craft 4 stick using {huge} oak planks"):
        text = Crafter(book, "minecraft:stick").execute(action).text
        assert text == f"Could not execute {action}"
        reference.reset(seed=0)
        with pytest.raises(ValueError):
            reference.step(action)
