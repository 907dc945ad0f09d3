"""The Ray actor behind ``RayVectorEnv``: a few sub-envs in one process, stepped in index order.

It mirrors ``gymnasium.vector.SyncVectorEnv``'s per-env loop (autoreset included) and returns raw
per-env results; the driver merges infos in global env order, so merged infos are exactly what
SyncVectorEnv builds. The class is plain Python: ``RayVectorEnv`` wraps it with ``ray.remote`` at
run time, so importing this module needs no Ray.
"""
from __future__ import annotations

import os
import socket
import time

from gymnasium.vector import AutoresetMode


def _rss_bytes() -> int:
    """Resident memory of this process (psutil when present, else /proc)."""
    try:
        import psutil
        return int(psutil.Process().memory_info().rss)
    except ImportError:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class EnvWorker:
    """Owns ``envs[k]`` = ``env_fns[k]()``, the global env ``indices[k]`` of the vector env."""

    def __init__(self, env_fns, indices, autoreset_mode: str):
        self.indices = list(indices)
        self.mode = AutoresetMode(autoreset_mode)
        self.envs = [fn() for fn in env_fns]
        self.autoreset = [False] * len(self.envs)
        # A reset already made (after a worker restart) that the next autoreset hands out instead of
        # calling env.reset() again, so the replacement env replays its last task and seed.
        self.pending = [None] * len(self.envs)
        self.busy = 0.0     # seconds inside env.step/reset during step(): wall minus this = Ray's overhead

    def describe(self) -> dict:
        env = self.envs[0]
        return {"pid": os.getpid(), "host": socket.gethostname(), "indices": self.indices,
                "observation_space": env.observation_space, "action_space": env.action_space,
                "metadata": dict(env.metadata), "render_mode": env.render_mode}

    def rss(self) -> int:
        return _rss_bytes()

    def reset(self, seeds, options, mask=None):
        """``[(obs, info) or None]``: None where ``mask`` leaves the env alone."""
        out = []
        for k, env in enumerate(self.envs):
            if mask is not None and not mask[k]:
                out.append(None)
                continue
            self.autoreset[k], self.pending[k] = False, None
            out.append(env.reset(seed=seeds[k], options=options))
        return out

    def restore(self, seeds, options, hold: bool):
        """Reset every env of a replacement worker with its own last seed and options (one per env); with
        ``hold`` the results wait for the next autoreset."""
        out = [env.reset(seed=s, options=o) for env, s, o in zip(self.envs, seeds, options, strict=True)]
        self.autoreset, self.pending = [False] * len(self.envs), [None] * len(self.envs)
        if hold:
            self.pending = list(out)
            self.autoreset = [True] * len(self.envs)
        return out

    def step(self, actions):
        """``[(obs, reward, terminated, truncated, info, final)]``; ``final`` = (obs, info) of the episode
        that SAME_STEP autoreset just ended, else None."""
        t0 = time.perf_counter()
        out = []
        for k, (env, action) in enumerate(zip(self.envs, actions, strict=True)):
            final = None
            if self.mode == AutoresetMode.NEXT_STEP and self.autoreset[k]:
                obs, info = self.pending[k] if self.pending[k] is not None else env.reset()
                self.pending[k] = None
                reward, term, trunc = 0.0, False, False
            else:
                if self.mode == AutoresetMode.DISABLED and self.autoreset[k]:
                    raise RuntimeError(f"env {self.indices[k]} ended its episode and autoreset is disabled: "
                                       "reset it (options={'reset_mask': ...}) before stepping it again")
                obs, reward, term, trunc, info = env.step(action)
                if self.mode == AutoresetMode.SAME_STEP and (term or trunc):
                    final = (obs, info)
                    obs, info = env.reset()
            self.autoreset[k] = bool(term or trunc)
            out.append((obs, float(reward), bool(term), bool(trunc), info, final))
        self.busy += time.perf_counter() - t0
        return out

    def busy_seconds(self) -> float:
        return self.busy

    def call(self, name: str, args, kwargs, invoke: bool = True):
        """As SyncVectorEnv.call (``invoke``) / get_attr (not ``invoke``) on each env."""
        out = []
        for env in self.envs:
            fn = env.get_wrapper_attr(name)
            out.append(fn(*args, **kwargs) if invoke and callable(fn) else fn)
        return out

    def set_attr(self, name: str, values):
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)

    def close(self) -> None:
        for env in self.envs:
            env.close()
