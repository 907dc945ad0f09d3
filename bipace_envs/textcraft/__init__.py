"""TextCraft (ADaPT's Minecraft crafting benchmark) as a deterministic gymnasium env.

    import gymnasium as gym, bipace_envs
    env = gym.make("bipace/TextCraft-v0", preset="adapt", split="test", depths=(2, 3))
    from bipace_envs.textcraft import list_tasks, expert_actions

Modules: ``recipes`` (data loading), ``engine`` (layout and command rules), ``tasks`` (presets,
splits, task ids), ``expert`` (shortest plans), ``env`` (the gymnasium env), ``reference``
(the original code pinned for parity tests and benchmarks).
"""
from .expert import expert_actions, expert_plan
from .recipes import load_book
from .tasks import PRESETS, list_tasks, resolve_task

__all__ = ["expert_actions", "expert_plan", "load_book", "PRESETS", "list_tasks", "resolve_task"]
