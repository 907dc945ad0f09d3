"""Deterministic replay: put an env back into a state an episode reached, by resetting it with the episode's
task and seed and re-applying the episode's actions, checking every replayed observation against the
recorded one.

    env = ReplayPrefix(make_env())
    obs, info = env.reset(seed=seed, options={"task_id": task, "replay": Replay(actions, anchor_hashes)})
    info["replay_history"]      # [(obs_k, action_k), ...]: what a prompter records to show the same history
    info["replay_first"]        # (obs_0, info_0) of the reset, what a prompter is reset with

``RolloutCollector.collect(..., replays=[...])`` resets its envs this way and feeds each prompter the
replayed history, so a continuation's prompts carry the same history as the recorded episode's.
Ground-truth advantages (``benchmarks/credit/advantage_accuracy.py``) sample continuations from replayed
states; an env whose replay diverges (a reset that ignores its seed, stochastic transitions) cannot give
them, so the first mismatch raises ``ReplayDivergence`` naming the step.
"""
from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym

from bipace_envs.common import obs_hash


def anchor_hash(anchor) -> str:
    """The observation hash of a recorded anchor (``info['anchor']``): the env's own ``obs_hash`` of a text
    anchor, of its ``repr`` otherwise."""
    return obs_hash(anchor if isinstance(anchor, str) else repr(anchor))


class ReplayDivergence(RuntimeError):
    """A replayed episode reached another observation than the recorded one."""


@dataclass(frozen=True)
class Replay:
    """An action prefix to re-apply after reset, and the anchor hashes of the states it passes through:
    ``anchors[k]`` is the hash of the state ``actions[k]`` was taken in, and ``anchors[len(actions)]``
    (when given) that of the state the prefix must reach."""
    actions: tuple
    anchors: tuple

    def __post_init__(self):
        if len(self.anchors) < len(self.actions):
            raise ValueError(f"a replay of {len(self.actions)} actions needs at least as many recorded "
                             f"anchor hashes; got {len(self.anchors)}")


class ReplayPrefix(gym.Wrapper):
    """``reset(options={'replay': Replay(...), ...})`` resets, then steps through the replay's actions; the
    other options go to the env's reset. Without ``replay`` it is the plain env."""

    def reset(self, *, seed=None, options=None):
        options = dict(options or {})
        replay = options.pop("replay", None)
        obs, info = self.env.reset(seed=seed, options=options or None)
        if replay is None:
            return obs, info
        first, history = (obs, info), []
        for k, action in enumerate(replay.actions):
            self.check(replay, k, info.get("anchor", obs), seed)
            next_obs, _, terminated, truncated, info = self.env.step(action)
            history.append((obs, action))
            obs = next_obs
            if (terminated or truncated) and k < len(replay.actions) - 1:
                raise ReplayDivergence(f"replay of task {options.get('task_id')!r} (seed {seed}) ended at "
                                       f"step {k} of a recorded {len(replay.actions)}-action prefix")
        if len(replay.anchors) > len(replay.actions):
            self.check(replay, len(replay.actions), info.get("anchor", obs), seed)
        info = dict(info, replay_history=history, replay_first=first)
        return obs, info

    def check(self, replay: Replay, k: int, anchor, seed) -> None:
        """Raise ``ReplayDivergence`` unless ``anchor`` hashes to the recorded ``replay.anchors[k]``."""
        got = anchor_hash(anchor)
        if got != replay.anchors[k]:
            env = type(self.env.unwrapped).__name__
            raise ReplayDivergence(
                f"{env} does not replay deterministically: after reset(seed={seed}) and {k} recorded "
                f"action(s) {list(replay.actions[:k])!r} the observation hash is {got}, the recorded one "
                f"{replay.anchors[k]} (observation now: {str(anchor)[:120]!r}). Ground truth by replay needs "
                "an env whose reset(seed, task) and steps are deterministic; make its randomness depend on "
                "the seed only")
