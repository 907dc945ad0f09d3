"""``RayVectorEnv``: a gymnasium vector env whose sub-envs live in Ray actors, several per actor.

    from bipace_envs.vector import RayVectorEnv
    envs = RayVectorEnv(env_fns, num_workers=4, cpus_per_worker=1.0)          # private local Ray
    envs = RayVectorEnv(env_fns, num_workers=16, address="auto")              # the cluster of `ray start`
    obs, infos = envs.reset(seed=[...], options={...}); envs.step(actions); envs.close()

Behaves as ``gymnasium.vector.SyncVectorEnv`` over the same ``env_fns``: envs are split into contiguous
blocks, one block per worker; each worker runs SyncVectorEnv's per-env loop (same autoreset modes) and
returns raw results, which are merged here in env order with the same ``_add_info``, so observations,
rewards and ``_key``-masked infos are identical. Every ``env_fn`` is cloudpickled to its worker: it must
not capture big objects (a model), and the worker's Python must import the same packages.

Faults: a worker that dies raises ``EnvWorkerError`` naming its env indices and task ids, or, with
``on_worker_death="restart"``, is replaced with a warning: its envs replay their last reset (same seed
and options) and report this step as truncated with ``info['worker_restarted']``. No call waits longer
than its timeout (``EnvTimeoutError`` names the late envs). ``close()`` kills every actor, and shuts
Ray down when this module started it and no other RayVectorEnv still uses it.
"""
from __future__ import annotations

import time
import warnings
from copy import deepcopy

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from bipace_envs.vector._worker import EnvWorker


class EnvWorkerError(RuntimeError):
    """A Ray env worker died (process killed, node lost, out of memory)."""


class EnvTimeoutError(TimeoutError):
    """A Ray env worker did not answer within the timeout."""


# Ray started by this module (not by the user) is shut down when its last RayVectorEnv closes.
_RAY = {"owned": False, "users": 0, "last_kill": float("-inf")}


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise ImportError("RayVectorEnv needs Ray: pip install 'bipace[ray]' (or pip install ray)") from exc
    return ray


def _acquire_ray(address: str | None, init_kwargs: dict | None):
    """Join the running Ray session, the cluster at ``address`` ("auto": the one `ray start` made on this
    machine), or start a private local instance (address None/""; never joins another user's cluster)."""
    ray = _import_ray()
    if not ray.is_initialized():
        kw = {"include_dashboard": False, "log_to_driver": False, **(init_kwargs or {})}
        ray.init(address=address or "local", **kw)
        _RAY["owned"], _RAY["users"] = True, 0
    if _RAY["owned"]:
        _RAY["users"] += 1
    return ray


def _release_ray(ray) -> None:
    if _RAY["owned"]:
        _RAY["users"] -= 1
        if _RAY["users"] <= 0:
            ray.shutdown()
            _RAY["owned"], _RAY["users"] = False, 0


class RayVectorEnv(VectorEnv):
    """Vector env over Ray actors, envs split into ``num_workers`` contiguous blocks.

    Sizing: this env reserves ``cpu_share`` of the cluster's CPUs. ``num_workers`` None = one worker per
    CPU of that share (at most one per env); ``cpus_per_worker`` None = the share split evenly over the
    workers, else a fixed (fractional) amount, which with ``num_workers`` None sets the worker count.
    Two vector envs alive together (the trainer's rollout and evaluation envs) each take half.
    ``actor_options`` go to ``ray.remote(...).options`` (``resources``, ``scheduling_strategy``,
    ``runtime_env``); ``init_kwargs`` to ``ray.init`` when this env starts Ray.
    Timeouts: ``step_timeout`` for reset/step/call, ``start_timeout`` for building the workers."""

    def __init__(self, env_fns, num_workers: int | None = None, cpus_per_worker: float | None = None,
                 cpu_share: float = 1.0,
                 address: str | None = None, autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
                 on_worker_death: str = "raise", step_timeout: float | None = 600.0,
                 start_timeout: float | None = 300.0, copy: bool = True, actor_options: dict | None = None,
                 init_kwargs: dict | None = None):
        super().__init__()
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("RayVectorEnv needs at least one env_fn")
        if on_worker_death not in ("raise", "restart"):
            raise ValueError(f"on_worker_death must be 'raise' or 'restart', got {on_worker_death!r}")
        if cpus_per_worker is not None and not cpus_per_worker >= 0:
            raise ValueError(f"cpus_per_worker must be >= 0 (or None: auto), got {cpus_per_worker}")
        if not 0 < cpu_share <= 1:
            raise ValueError(f"cpu_share must be in (0, 1], got {cpu_share}")
        if num_workers is not None and num_workers < 1:
            raise ValueError(f"num_workers must be >= 1 (or None: auto), got {num_workers}")
        for name, t in (("step_timeout", step_timeout), ("start_timeout", start_timeout)):
            if t is not None and not t > 0:
                raise ValueError(f"{name} must be > 0 seconds (or None to wait forever), got {t}")
        self.env_fns, self.num_envs, self.copy = env_fns, len(env_fns), copy
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.on_worker_death = on_worker_death
        self.step_timeout, self.start_timeout = step_timeout, start_timeout
        self._closed_workers, self._broken = False, None
        self._ray = _acquire_ray(address, init_kwargs)
        try:
            self._start(num_workers, cpus_per_worker, cpu_share, actor_options or {})
        except BaseException:
            self._shutdown_workers()
            _release_ray(self._ray)
            self._closed_workers = True
            raise

    # ------------------------------------------------------------------ construction
    def _start(self, num_workers, cpus_per_worker, cpu_share, actor_options) -> None:
        ray = self._ray
        total = float(ray.cluster_resources().get("CPU", 0))
        budget = total * cpu_share
        if cpus_per_worker is None:     # auto: split this env's share of the cluster over its workers
            num_workers = num_workers or max(1, min(self.num_envs, int(budget)))
            per = budget / max(1, min(int(num_workers), self.num_envs))
            # Ray takes whole numbers above one CPU and 4 decimals below
            cpus_per_worker = float(int(per)) if per >= 1 else max(0.0001, int(per * 1e4) / 1e4)
        elif num_workers is None:
            num_workers = int(budget // cpus_per_worker) if cpus_per_worker > 0 else self.num_envs
        num_workers = max(1, min(int(num_workers), self.num_envs))
        need = num_workers * cpus_per_worker
        if need > total + 1e-9:
            raise ValueError(f"{num_workers} env workers x {cpus_per_worker:g} CPUs = {need:g} CPUs, but "
                             f"the Ray cluster has {total:g}: lower num_workers or cpus_per_worker "
                             "(fractions are fine), or add nodes")
        free = self._free_cpus(need)
        if free + 1e-9 < need:
            raise ValueError(f"{num_workers} env workers x {cpus_per_worker:g} CPUs = {need:g} CPUs, but "
                             f"only {free:g} of the cluster's {total:g} CPUs are free (other actors, e.g. "
                             "another RayVectorEnv, hold the rest): lower num_workers, cpus_per_worker "
                             "or cpu_share")
        self.blocks = [list(map(int, b)) for b in np.array_split(np.arange(self.num_envs), num_workers)]
        self._remote = ray.remote(EnvWorker).options(num_cpus=cpus_per_worker, max_restarts=0,
                                                     max_task_retries=0, **actor_options)
        self.workers = [None] * num_workers
        self.worker_info = [None] * num_workers
        for w in range(num_workers):
            self.workers[w] = self._spawn(w)
        infos, dead = self._gather({w: a.describe.remote() for w, a in enumerate(self.workers)},
                                   self.start_timeout, "start")
        if dead:
            w, exc = next(iter(dead.items()))
            raise EnvWorkerError(f"Ray env worker {w} (envs {self.blocks[w]}) died while building its envs: "
                                 f"{exc}")
        self.worker_info = [infos[w] for w in range(num_workers)]
        first = self.worker_info[0]
        self.metadata = {**first["metadata"], "autoreset_mode": self.autoreset_mode}
        self.render_mode = first["render_mode"]
        self.single_observation_space = first["observation_space"]
        self.single_action_space = first["action_space"]
        for w, info in enumerate(self.worker_info):
            if (info["observation_space"] != self.single_observation_space
                    or info["action_space"] != self.single_action_space):
                raise RuntimeError(f"envs {self.blocks[w]} have other spaces than env 0: "
                                   f"{info['observation_space']}, {info['action_space']}")
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._observations = create_empty_array(self.single_observation_space, n=self.num_envs, fn=np.zeros)
        self._obs = [None] * self.num_envs
        self._info = [{} for _ in range(self.num_envs)]
        self._reset_seed = [None] * self.num_envs
        self._reset_options = [None] * self.num_envs

    def _free_cpus(self, need: float, wait: float = 5.0) -> float:
        """Free CPUs, waiting (up to ``wait`` s after the last kill) for killed actors to hand theirs back."""
        deadline = _RAY["last_kill"] + wait
        while True:
            free = float(self._ray.available_resources().get("CPU", 0))
            if free + 1e-9 >= need or time.monotonic() > deadline:
                return free
            time.sleep(0.2)

    def _spawn(self, w: int):
        fns = [self.env_fns[i] for i in self.blocks[w]]
        return self._remote.remote(fns, self.blocks[w], self.autoreset_mode.value)

    # ------------------------------------------------------------------ plumbing
    def _where(self, w: int) -> str:
        info = self.worker_info[w] or {}
        ids = [self._info[i].get("task_id") for i in self.blocks[w]]
        return (f"worker {w} (pid {info.get('pid', '?')} on {info.get('host', '?')}): envs {self.blocks[w]}, "
                f"task ids {ids}")

    def _check_usable(self) -> None:
        if self._closed_workers:
            raise RuntimeError("RayVectorEnv is closed")
        if self._broken:
            raise RuntimeError(f"RayVectorEnv is unusable after an earlier failure ({self._broken}); "
                               "close() it")

    def _gather(self, calls: dict, timeout, what: str):
        """Wait for one call per worker. Returns ({worker: result}, {worker: exception of a dead worker});
        other exceptions (an env's own error) propagate as in SyncVectorEnv."""
        ray = self._ray
        from ray.exceptions import RayActorError
        refs = list(calls.values())
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if pending:
            late = set(pending)
            where = "; ".join(self._where(w) for w, r in calls.items() if r in late)
            self._broken = f"{what} timed out after {timeout:g} s"
            raise EnvTimeoutError(f"RayVectorEnv {what} got no answer within {timeout:g} s from {where}. "
                                  "The env may be stuck (or the worker starved of CPU); raise step_timeout / "
                                  "start_timeout if it is just slow, and close() this vector env.")
        results, dead = {}, {}
        for w, ref in calls.items():
            try:
                results[w] = ray.get(ref)
            except RayActorError as exc:
                dead[w] = exc
        return results, dead

    def _handle_dead(self, dead: dict, what: str) -> list[int]:
        """Raise for dead workers, or (restart mode) replace them with a warning and return their ids."""
        if not dead:
            return []
        where = "; ".join(self._where(w) for w in dead)
        cause = next(iter(dead.values()))
        if self.on_worker_death != "restart":
            self._broken = f"a Ray env worker died during {what}"
            raise EnvWorkerError(f"Ray env {where} died during {what}; their episodes are lost. "
                                 f"Use on_worker_death='restart' to replace dead workers. Cause: {cause}")
        warnings.warn(f"Ray env {where} died during {what} and was restarted; its envs replay their last "
                      "reset (same seed and options)", RuntimeWarning, stacklevel=3)
        for w in dead:
            self._ray.kill(self.workers[w], no_restart=True)
            _RAY["last_kill"] = time.monotonic()
            self.workers[w] = self._spawn(w)
        infos, again = self._gather({w: self.workers[w].describe.remote() for w in dead}, self.start_timeout,
                                    "restart")
        if again:
            self._broken = "a restarted Ray env worker died again"
            raise EnvWorkerError(f"restarted Ray env {where} died again: {next(iter(again.values()))}")
        for w, info in infos.items():
            self.worker_info[w] = info
        return list(dead)

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed=None, options=None):
        self._check_usable()
        n = self.num_envs
        if seed is None or isinstance(seed, int):      # SyncVectorEnv's rule: int seed -> env i gets seed + i
            seeds = [None if seed is None else seed + i for i in range(n)]
        else:
            seeds = list(seed)
        if len(seeds) != n:
            raise ValueError(f"If seeds are passed as a list the length must match num_envs={n} "
                             f"but got length={len(seeds)}.")
        mask = None
        if options is not None and "reset_mask" in options:
            options = dict(options)
            mask = options.pop("reset_mask")
            ok = isinstance(mask, np.ndarray) and mask.shape == (n,) and mask.dtype == np.bool_ and mask.any()
            if not ok:
                raise ValueError(f"options['reset_mask'] must be a bool numpy array of shape ({n},) "
                                 "with at least one True")
        todo = [w for w, b in enumerate(self.blocks) if mask is None or mask[b].any()]
        for i in range(n):
            if mask is None or mask[i]:
                self._reset_seed[i], self._reset_options[i] = seeds[i], options

        def call(w):
            b = self.blocks[w]
            sub = None if mask is None else mask[b]
            return self.workers[w].reset.remote([seeds[i] for i in b], options, sub)

        results, dead = self._gather({w: call(w) for w in todo}, self.step_timeout, "reset")
        for w in self._handle_dead(dead, "reset"):
            more, again = self._gather({w: call(w)}, self.step_timeout, "reset")
            if again:
                self._broken = "a restarted Ray env worker died again"
                raise EnvWorkerError(f"restarted Ray env {self._where(w)} died again: {again[w]}")
            results.update(more)
        infos = {}
        for w in todo:
            for i, res in zip(self.blocks[w], results[w]):
                if res is not None:
                    self._obs[i], self._info[i] = res
                    infos = self._add_info(infos, res[1], i)
        return self._batch(), infos

    def step(self, actions):
        self._check_usable()
        actions = list(actions)
        if len(actions) != self.num_envs:
            raise ValueError(f"step needs one action per env ({self.num_envs}), got {len(actions)}")
        calls = {w: a.step.remote([actions[i] for i in self.blocks[w]]) for w, a in enumerate(self.workers)}
        results, dead = self._gather(calls, self.step_timeout, "step")
        for w in self._handle_dead(dead, "step"):
            results[w] = self._restored(w)
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terms, truncs = np.zeros(self.num_envs, np.bool_), np.zeros(self.num_envs, np.bool_)
        infos = {}
        for w, block in enumerate(self.blocks):
            for i, (obs, r, te, tr, info, final) in zip(block, results[w]):
                self._obs[i], self._info[i] = obs, info
                rewards[i], terms[i], truncs[i] = r, te, tr
                if final is not None:
                    infos = self._add_info(infos, {"final_obs": final[0], "final_info": final[1]}, i)
                infos = self._add_info(infos, info, i)
        return self._batch(), rewards, terms, truncs, infos

    def _restored(self, w: int) -> list:
        """Step results of a replaced worker's envs: the episode is cut (truncated) at its last known
        observation; the envs are reset with their last seed/options now and start over at the next
        autoreset (SAME_STEP: at once, as gymnasium does)."""
        b = self.blocks[w]
        same = self.autoreset_mode == AutoresetMode.SAME_STEP
        ref = self.workers[w].restore.remote([self._reset_seed[i] for i in b],
                                             [self._reset_options[i] for i in b], not same)
        fresh, dead = self._gather({w: ref}, self.step_timeout, "reset after a restart")
        if dead:
            self._broken = "a restarted Ray env worker died again"
            raise EnvWorkerError(f"restarted Ray env {self._where(w)} died again: {dead[w]}")
        out = []
        for k, i in enumerate(b):
            last = (self._obs[i], {**self._info[i], "worker_restarted": True})
            if same:
                obs, info = fresh[w][k]
                out.append((obs, 0.0, False, True, {**info, "worker_restarted": True}, last))
            else:
                out.append((last[0], 0.0, False, True, last[1], None))
        return out

    def _batch(self):
        self._observations = concatenate(self.single_observation_space, self._obs, self._observations)
        return deepcopy(self._observations) if self.copy else self._observations

    def call(self, name: str, *args, **kwargs) -> tuple:
        """``env.get_wrapper_attr(name)(*args, **kwargs)`` on every env (the attribute if not callable)."""
        return self._call(name, args, kwargs, True)

    def get_attr(self, name: str) -> tuple:
        return self._call(name, (), {}, False)

    def _call(self, name: str, args, kwargs, invoke: bool) -> tuple:
        self._check_usable()
        calls = {w: a.call.remote(name, args, kwargs, invoke) for w, a in enumerate(self.workers)}
        results, dead = self._gather(calls, self.step_timeout, f"call({name!r})")
        if dead:
            raise EnvWorkerError(f"Ray env {self._where(next(iter(dead)))} died during call({name!r})")
        return tuple(x for w in range(len(self.workers)) for x in results[w])

    def set_attr(self, name: str, values) -> None:
        self._check_usable()
        values = list(values) if isinstance(values, (list, tuple)) else [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr needs one value per env ({self.num_envs}), got {len(values)}")
        calls = {w: a.set_attr.remote(name, [values[i] for i in self.blocks[w]])
                 for w, a in enumerate(self.workers)}
        _, dead = self._gather(calls, self.step_timeout, f"set_attr({name!r})")
        if dead:
            raise EnvWorkerError(f"Ray env {self._where(next(iter(dead)))} died during set_attr({name!r})")

    def worker_rss(self) -> list[int]:
        """Resident memory (bytes) of each worker process."""
        self._check_usable()
        results, _ = self._gather({w: a.rss.remote() for w, a in enumerate(self.workers)},
                                  self.step_timeout, "rss")
        return [results.get(w, 0) for w in range(len(self.workers))]

    def worker_busy_seconds(self) -> list[float]:
        """Seconds each worker has spent inside its envs' step (and autoreset) calls: a step's wall time
        minus the busiest worker's share is what Ray itself costs (benchmarks/speed/vector_speed.py)."""
        self._check_usable()
        results, _ = self._gather({w: a.busy_seconds.remote() for w, a in enumerate(self.workers)},
                                  self.step_timeout, "busy_seconds")
        return [results.get(w, 0.0) for w in range(len(self.workers))]

    def _shutdown_workers(self) -> None:
        ray = self._ray
        live = [a for a in getattr(self, "workers", []) if a is not None]
        if live and not self._broken:
            try:    # let the envs close their engines; a dead or stuck worker is killed regardless
                ray.wait([a.close.remote() for a in live], num_returns=len(live), timeout=10)
            except Exception:  # noqa: BLE001 (closing must not fail on a dead worker)
                pass
        for a in live:
            ray.kill(a, no_restart=True)
            _RAY["last_kill"] = time.monotonic()
        self.workers = [None] * len(getattr(self, "workers", []))

    def close_extras(self, **kwargs) -> None:
        if self._closed_workers:
            return
        self._closed_workers = True
        try:
            self._shutdown_workers()
        finally:
            _release_ray(self._ray)
