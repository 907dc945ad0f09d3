"""Per-env agent settings: gym id, reward map (as in the papers), horizon, task splits, expert.

    from agents.envs import get_env_spec
    spec = get_env_spec("textcraft")
    env = spec.make(max_steps=30, depths=(1, 2)); spec.tasks(env, "train")
    spec.split_tasks(functools.partial(spec.make, depths=(1, 2)), "test")   # makes and closes an env
    env.reset(options={"task_id": "stick", **spec.expert_reset_options}); spec.expert(env)

Reward maps turn the env's raw step reward into the training reward: 10 on success for TextCraft and
ALFWorld, and for WebShop 10 only for a perfect purchase (score 1.0), 0 otherwise (spec §7). Add an
env by adding an ``EnvSpec`` to ``ENV_SPECS``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import gymnasium as gym


def reward_won(reward: float, terminated: bool, info: dict) -> float:
    """10 when the step wins the episode (TextCraft, ALFWorld)."""
    return 10.0 if info.get("won", False) else 0.0


def reward_webshop(reward: float, terminated: bool, info: dict) -> float:
    """10 only for a perfect purchase; partial scores stay a metric. Reads info['score'] (in [0, 1])
    so it is right whichever reward_mode the env was made with."""
    return 10.0 if terminated and info.get("score", reward) >= 1.0 else 0.0


def _call_unwrapped(name: str):
    def fn(env, *args, **kw):
        target = env.unwrapped
        if not hasattr(target, name):
            raise NotImplementedError(f"{type(target).__name__} has no {name}(); this env cannot provide it "
                                      "yet")
        return getattr(target, name)(*args, **kw)
    return fn


@dataclass
class EnvSpec:
    name: str
    gym_id: str
    reward_map: Callable[[float, bool, dict], float]
    max_steps: int                          # paper horizon
    fallback_chars: int = 30                # parser fallback (ALFWorld 30, WebShop 20)
    # ``tasks(env, split) -> list`` of task ids usable as reset(options={'task_id': ...})
    tasks: Callable = _call_unwrapped("task_ids")
    # ``expert(env) -> list[str]``: the expert's plan from the env's current state (at least its next
    # action; empty once the episode is over); SFT re-plans at every step and takes the first
    expert: Callable = _call_unwrapped("expert_actions")
    # reset options an expert episode needs (ALFWorld's expert must watch the episode from its start)
    expert_reset_options: dict = field(default_factory=dict)
    # gym.make kwarg that fixes the split at construction (WebShop, ALFWorld); None if one env has all
    split_kwarg: str | None = None

    def make(self, **kwargs):
        import bipace_envs  # noqa: F401  (registers the ids)
        return gym.make(self.gym_id, **kwargs)

    def split_tasks(self, make_env: Callable, split: str, limit: int | None = None) -> list:
        """The task ids of ``split`` (its first ``limit``) in the env ``make_env()`` builds, which is made
        for this and closed again (task lists come from the env, so its kwargs choose them)."""
        env = make_env()
        try:
            return list(self.tasks(env, split))[:limit]
        finally:
            env.close()


def textcraft_tasks(env, split: str) -> list[str]:
    """Task ids of ``split`` under the env's own preset and depth filter."""
    from bipace_envs.textcraft.tasks import list_tasks
    cfg = env.unwrapped.config
    return list_tasks(cfg.preset, split, cfg.depths)


def webshop_expert(env) -> list[str]:
    """WebShop's oracle in its imitable mode: search with the instruction text, open the first listed
    product that buying with the goal's options scores 1.0, pick those options, buy
    (``bipace_envs.webshop.oracle``; the goal-product mode searches with product titles half the time)."""
    action = env.unwrapped.oracle_action("any_perfect")
    return [action] if action else []


def alfworld_expert(env) -> list[str]:
    """alfworld's handcoded expert (Fast Downward where it fails); needs reset(options={'expert': True})."""
    action = env.unwrapped.expert_action()
    return [action] if action else []


def split_bound_tasks(env, split: str) -> list:
    """WebShop and ALFWorld fix their split at construction (``EnvSpec.split_kwarg``): list the env's
    own task ids when the split matches, and say so plainly otherwise."""
    u = env.unwrapped
    own = getattr(u, "split", None) or getattr(getattr(u, "cfg", None), "split", None)
    if own != split:
        raise ValueError(f"{type(u).__name__} was made for split {own!r}, so it cannot list {split!r} tasks; "
                         f"make the env with split={split!r} (the trainer builds one env per split)")
    ids = u.task_ids
    return list(ids() if callable(ids) else ids)


ENV_SPECS: dict[str, EnvSpec] = {
    "textcraft": EnvSpec("textcraft", "bipace/TextCraft-v0", reward_won, max_steps=50, tasks=textcraft_tasks),
    "alfworld": EnvSpec("alfworld", "bipace/ALFWorld-v0", reward_won, max_steps=50, tasks=split_bound_tasks,
                        expert=alfworld_expert, expert_reset_options={"expert": True}, split_kwarg="split"),
    "webshop": EnvSpec("webshop", "bipace/WebShop-v0", reward_webshop, max_steps=15, fallback_chars=20,
                       tasks=split_bound_tasks, expert=webshop_expert, split_kwarg="split"),
}


def split_env_factory(spec: EnvSpec, kwargs: dict, split: str, max_steps: int):
    """A picklable maker of ``spec``'s env for one split: WebShop/ALFWorld take the split at
    construction (``split_kwarg``), TextCraft lists every split from one env (its preset and depth filter
    live in ``kwargs``)."""
    key = spec.split_kwarg
    if key and key in kwargs:
        raise ValueError(f"env_kwargs or eval_env_kwargs sets {key!r}; choose splits with "
                         "--train-split/--eval-split instead")
    return functools.partial(spec.make, max_steps=max_steps, **kwargs, **({key: split} if key else {}))


def get_env_spec(name: str) -> EnvSpec:
    if name not in ENV_SPECS:
        raise ValueError(f"unknown env {name!r}; registered: {sorted(ENV_SPECS)}")
    return ENV_SPECS[name]
