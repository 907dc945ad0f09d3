"""ALFWorld on the real TextWorld engine, offline: real games when a data folder is given, generated
games otherwise. ``gym.make("bipace/ALFWorld-v0", ...)``; see ``env.ALFWorldEnv`` for the arguments and
``generator`` for how games are made (``python -m bipace_envs.alfworld.generator --help``)."""
from .games import TASK_TYPES

__all__ = ["TASK_TYPES"]
