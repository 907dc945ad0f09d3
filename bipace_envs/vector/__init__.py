"""Vector envs beyond gymnasium's own: ``RayVectorEnv`` runs the sub-envs in Ray actors (``pip install
'bipace[ray]'``); Ray itself is imported only when one is built."""
from bipace_envs.vector.ray_env import EnvTimeoutError, EnvWorkerError, RayVectorEnv

__all__ = ["RayVectorEnv", "EnvWorkerError", "EnvTimeoutError"]
