"""The edge cases every registered bipace env handles alike: a step after the episode ended raises
``EpisodeEndedError``; a multi-line or over-long action is an invalid action that changes nothing; and
``max_steps`` must be a positive int. One test per rule, run on all three envs."""
from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import bipace_envs
from bipace_envs.common import MAX_ACTION_LENGTH, EpisodeEndedError, is_one_command

TEXTCRAFT, WEBSHOP, ALFWORLD = bipace_envs.ENV_IDS

# Per env: a command that changes the state, picked from the reset info ...
MOVE = {TEXTCRAFT: lambda info: next(a for a in info["admissible_actions"] if a.startswith("get ")),
        WEBSHOP: lambda info: "search[shoes]",
        ALFWORLD: lambda info: next(a for a in info["admissible_actions"] if a.startswith("go to "))}
# ... one whose observation shows the state without changing it (WebShop: a no-op shows the page) ...
LOOK = {TEXTCRAFT: "inventory", WEBSHOP: "look", ALFWORLD: "look"}
# ... the env's usual answer to an invalid action, given the action and the observation before it ...
INVALID_ANSWER = {TEXTCRAFT: lambda action, before: f"Could not execute {action}",
                  WEBSHOP: lambda action, before: before,
                  ALFWORLD: lambda action, before: "Nothing happens."}
# ... and its expert's next command.
EXPERT = {TEXTCRAFT: lambda env, info: env.expert_actions()[0],
          WEBSHOP: lambda env, info: env.oracle_action(),
          ALFWORLD: lambda env, info: info["expert_action"]}
EXPERT_RESET = {TEXTCRAFT: {"task_id": "stick"}, WEBSHOP: {}, ALFWORLD: {"expert": True}}

LINE_BREAKS = ["\n", "\r\n", "\r", "\u2028", "\x85"]
ENDED = r"step\(\) called after the episode ended .*call reset\(\)"


@pytest.fixture(scope="module")
def make(shared_dir):
    """``make(env_id, **kwargs)``: the unwrapped env; ALFWorld plays the shared real games (no generation)."""
    def make(env_id, **kwargs):
        if env_id == ALFWORLD:
            kwargs = {"data_dir": str(shared_dir / "data" / "alfworld"), "split": "valid_unseen", **kwargs}
        return gym.make(env_id, **kwargs).unwrapped
    return make


@pytest.fixture(scope="module")
def fuzz_env(make):
    """``fuzz_env(env_id)``: one env per id for all the fuzz examples (ALFWorld parses its game once)."""
    envs = {}

    def get(env_id):
        if env_id not in envs:
            envs[env_id] = make(env_id, max_steps=100)
        return envs[env_id]
    return get


def look(env, env_id) -> str:
    return env.step(LOOK[env_id])[0]


@pytest.mark.parametrize("env_id", bipace_envs.ENV_IDS)
def test_step_after_truncation_raises_until_reset(env_id, make):
    env = make(env_id, max_steps=np.int64(2))       # numpy ints are ints
    env.reset(seed=0)
    assert [env.step("dance")[3] for _ in range(2)] == [False, True]
    for action in ("dance", LOOK[env_id]):
        with pytest.raises(EpisodeEndedError, match=ENDED):
            env.step(action)
    env.reset(seed=0)
    assert env.step("dance")[3] is False


@pytest.mark.parametrize("env_id", bipace_envs.ENV_IDS)
def test_step_after_winning_raises(env_id, make):
    env = make(env_id, max_steps=60)
    obs, info = env.reset(seed=0, options=EXPERT_RESET[env_id])
    for _ in range(60):
        obs, reward, terminated, truncated, info = env.step(EXPERT[env_id](env, info))
        if terminated or truncated:
            break
    assert terminated and info["won"] and reward > 0
    with pytest.raises(EpisodeEndedError, match=ENDED):
        env.step(LOOK[env_id])


@pytest.mark.parametrize("env_id", bipace_envs.ENV_IDS)
def test_multi_line_action_is_invalid_and_changes_nothing(env_id, make):
    env = make(env_id, max_steps=50)
    obs, info = env.reset(seed=0)
    move = MOVE[env_id](info)
    seen = look(env, env_id)
    for br in LINE_BREAKS:
        action = f"{move}{br}{LOOK[env_id]}"
        assert not env.action_space.contains(action)
        before = env.step(LOOK[env_id])[0]
        obs, reward, terminated, truncated, info = env.step(action)
        assert (info["action_valid"], reward, terminated) == (False, 0.0, False), repr(action)
        assert obs == INVALID_ANSWER[env_id](action, before)
        assert look(env, env_id) == seen, f"{action!r} changed the state"
    # Surrounding whitespace is not a second line; the command alone does change what LOOK shows.
    assert env.action_space.contains(move + "\n")
    assert env.step(move + "\n")[4]["action_valid"] is True
    assert look(env, env_id) != seen


@pytest.mark.parametrize("env_id", bipace_envs.ENV_IDS)
def test_over_long_action_is_invalid_and_changes_nothing(env_id, make):
    env = make(env_id, max_steps=50)
    obs, info = env.reset(seed=0)
    move = MOVE[env_id](info)
    seen = look(env, env_id)
    too_long = move.ljust(MAX_ACTION_LENGTH + 1)    # the command and trailing spaces
    assert not env.action_space.contains(too_long)
    before = env.step(LOOK[env_id])[0]
    obs, reward, terminated, truncated, info = env.step(too_long)
    assert (info["action_valid"], reward, terminated) == (False, 0.0, False)
    assert obs == INVALID_ANSWER[env_id](too_long, before)
    assert look(env, env_id) == seen
    at_limit = move.ljust(MAX_ACTION_LENGTH)
    assert env.action_space.contains(at_limit) and env.step(at_limit)[4]["action_valid"] is True


@pytest.mark.parametrize("env_id", bipace_envs.ENV_IDS)
@pytest.mark.parametrize("value, error", [(0, ValueError), (-1, ValueError), (2.5, TypeError),
                                          (5.0, TypeError), ("5", TypeError), (True, TypeError),
                                          (None, TypeError)])
def test_max_steps_must_be_a_positive_int(env_id, make, value, error):
    with pytest.raises(error, match=rf"max_steps must be a positive int.*got {re.escape(repr(value))}"):
        make(env_id, max_steps=value)


def _actions():
    """Short texts of commands, junk and line breaks, and the same padded to about MAX_ACTION_LENGTH."""
    words = st.sampled_from(["look", "inventory", "get 1 oak logs", "search[shoes]", "click[buy now]",
                             "go to desk 1", "dance", " ", "é", "\t", *LINE_BREAKS])
    short = st.lists(words, max_size=5).map("".join)
    padded = st.tuples(short, st.integers(MAX_ACTION_LENGTH - 2, MAX_ACTION_LENGTH + 2)).map(
        lambda t: t[0].ljust(t[1]))
    return st.one_of(short, padded, st.text(max_size=30))


@pytest.mark.parametrize("env_id", bipace_envs.ENV_IDS)
@settings(max_examples=40, deadline=None, derandomize=True)
@given(actions=st.lists(_actions(), min_size=1, max_size=6))
def test_fuzzed_actions_follow_the_shared_rule(env_id, fuzz_env, actions):
    """Any str is answered; one outside the action space (``is_one_command``) is invalid, gets the env's
    usual invalid answer and leaves the state as it was."""
    env = fuzz_env(env_id)
    env.reset(seed=0)
    for action in actions:
        one = is_one_command(action)
        assert env.action_space.contains(action) == one
        if not one:
            before = env.step(LOOK[env_id])[0]
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and isinstance(info["action_valid"], bool)
        if not one:
            assert (info["action_valid"], reward, terminated) == (False, 0.0, False), repr(action)
            assert obs == INVALID_ANSWER[env_id](action, before)
            assert env.step(LOOK[env_id])[0] == before
        if terminated or truncated:
            break
