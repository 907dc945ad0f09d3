"""Vector-env speed: SyncVectorEnv, AsyncVectorEnv(shared_memory=False) and RayVectorEnv side by side.

    python -m benchmarks.speed.vector_speed                       # TextCraft + ALFWorld, 16 and 64 envs
    python -m benchmarks.speed.vector_speed --envs textcraft --sizes 16 --ray-workers 2 4

For each env and size every mode plays the same episodes (same seeds, task ids and actions: admissible
ones drawn with a fixed RNG) on one local Ray instance started here (``--ray-cpus``, default the
machine's cores). Reported per mode: build and reset seconds, vector-step milliseconds, env steps per
second, the worker processes and their mean resident memory (Sync: this process, model-free), and
for Ray its own cost per vector step: wall time minus the time the busiest worker spent inside its
envs (pickling, the actor round trip, scheduling), measured in the same steps, so machine load that
slows the envs does not count as overhead. A 1-worker Ray run is added unless ``--no-overhead``.
ALFWorld plays the real validation games of ``--alfworld-data`` (a few distinct games, so that game
loading does not dominate) with fewer steps, as its engine costs tens of ms per step.
"""
from __future__ import annotations

import argparse
import os
import time
from functools import partial

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

HERE = os.path.dirname(os.path.abspath(__file__))


def _rss_mb(pid: int | None = None) -> float:
    import psutil
    return psutil.Process(pid).memory_info().rss / 2**20


def env_maker(name: str, args):
    import gymnasium as gym
    if name == "textcraft":
        return partial(gym.make, "bipace/TextCraft-v0", max_steps=50)
    return partial(gym.make, "bipace/ALFWorld-v0", data_dir=args.alfworld_data, split="valid_seen",
                   max_steps=50)


def task_pool(name: str, make, args) -> list:
    if name == "textcraft":
        return [None]                   # the seed draws the goal
    probe = make()
    ids = list(probe.unwrapped.task_ids)
    probe.close()
    return [ids[k] for k in np.linspace(0, len(ids) - 1, args.alfworld_games).astype(int)]


def build(mode: str, fns, workers: int):
    import gymnasium as gym
    if mode == "sync":
        return gym.vector.SyncVectorEnv(fns)
    if mode == "async":
        return gym.vector.AsyncVectorEnv(fns, shared_memory=False)
    from bipace_envs.vector import RayVectorEnv
    return RayVectorEnv(fns, num_workers=workers, step_timeout=1800, start_timeout=1800)


def worker_memory(mode: str, envs, base_rss: float) -> tuple[int, float]:
    """(processes holding envs, mean resident MB per process)."""
    if mode == "sync":
        return 1, _rss_mb()             # this whole process (it holds the envs)
    if mode == "async":
        rss = [_rss_mb(p.pid) for p in envs.processes]
        return len(rss), float(np.mean(rss))
    rss = envs.worker_rss()
    return len(rss), float(np.mean(rss)) / 2**20


def measure(name: str, n: int, mode: str, workers: int, steps: int, args) -> dict:
    from agents.rollout import _indexed_env
    make = env_maker(name, args)
    pool = task_pool(name, make, args)
    fns = [partial(_indexed_env, make, i) for i in range(n)]
    tasks = [pool[i % len(pool)] for i in range(n)]
    base = _rss_mb()
    t0 = time.perf_counter()
    envs = build(mode, fns, workers)
    t_build = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        obs, infos = envs.reset(seed=list(range(n)), options={"task_ids": tasks})
        t_reset = time.perf_counter() - t0
        rng = np.random.default_rng(0)
        busy0 = envs.worker_busy_seconds() if mode == "ray" else None
        t_step = 0.0
        for _ in range(steps):
            actions = []
            for i in range(n):
                adm = infos["admissible_actions"][i] if infos["_admissible_actions"][i] else ["inventory"]
                actions.append(str(adm[rng.integers(len(adm))]) if len(adm) else "inventory")
            t0 = time.perf_counter()
            obs, _, _, _, infos = envs.step(actions)
            t_step += time.perf_counter() - t0
        procs, rss = worker_memory(mode, envs, base)
        # Ray's own cost: wall time of a vector step minus the time its busiest worker spent in the envs
        busy = None if busy0 is None else max(b - a for a, b in zip(busy0, envs.worker_busy_seconds()))
    finally:
        envs.close()
    return {"env": name, "n": n, "mode": mode if mode != "ray" else f"ray x{workers}", "build_s": t_build,
            "reset_s": t_reset, "step_ms": 1e3 * t_step / steps, "steps_per_s": n * steps / t_step,
            "procs": procs, "rss_mb": rss,
            "overhead_ms": None if busy is None else 1e3 * (t_step - busy) / steps}


def table(rows: list[dict]) -> str:
    out = ["| env | envs | mode | build s | reset s | ms / vector step | env steps/s | vs sync | processes "
           "| RSS MB each | Ray overhead ms / step |", "|" + "---|" * 11]
    sync = {(r["env"], r["n"]): r["steps_per_s"] for r in rows if r["mode"] == "sync"}
    for r in rows:
        ratio = r["steps_per_s"] / sync[(r["env"], r["n"])] if (r["env"], r["n"]) in sync else float("nan")
        over = "" if r["overhead_ms"] is None else f"{r['overhead_ms']:.2f}"
        out.append(f"| {r['env']} | {r['n']} | {r['mode']} | {r['build_s']:.1f} | {r['reset_s']:.2f} | "
                   f"{r['step_ms']:.1f} | {r['steps_per_s']:.0f} | {ratio:.2f}x | {r['procs']} | "
                   f"{r['rss_mb']:.0f} | {over} |")
    return "\n".join(out)


def overheads(rows: list[dict]) -> str:
    lines = []
    for r in rows:
        if r["overhead_ms"] is None:
            continue
        sync = next((s for s in rows if (s["env"], s["n"], s["mode"]) == (r["env"], r["n"], "sync")), None)
        lines.append(f"- {r['env']}, {r['n']} envs, {r['mode']}: Ray costs {r['overhead_ms']:.2f} ms per "
                     f"vector step ({1e3 * r['overhead_ms'] / r['n']:.0f} us per env step)"
                     + (f"; a sync vector step takes {sync['step_ms']:.2f} ms" if sync else ""))
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=["textcraft", "alfworld"], choices=["textcraft", "alfworld"])
    p.add_argument("--sizes", nargs="+", type=int, default=[16, 64])
    p.add_argument("--modes", nargs="+", default=["sync", "async", "ray"], choices=["sync", "async", "ray"])
    p.add_argument("--ray-workers", nargs="+", type=int, default=[2], help="Ray runs to make (workers each)")
    p.add_argument("--ray-cpus", type=int, default=os.cpu_count(), help="CPUs of the local Ray instance")
    p.add_argument("--no-overhead", action="store_true", help="skip the 1-worker Ray run of each setting")
    p.add_argument("--textcraft-steps", type=int, default=200)
    p.add_argument("--alfworld-steps", type=int, default=4)
    p.add_argument("--alfworld-games", type=int, default=4, help="distinct games shared by the envs")
    p.add_argument("--alfworld-data",
                   default=os.path.join(HERE, "..", "..", "..", "shared", "data", "alfworld"))
    p.add_argument("--alfworld-max-async", type=int, default=64,
                   help="skip ALFWorld's Async run above this many env processes (each holds an engine)")
    args = p.parse_args(argv)
    import ray
    import bipace_envs  # noqa: F401
    ray.init(address="local", num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
    rows = []
    try:
        for name in args.envs:
            steps = args.textcraft_steps if name == "textcraft" else args.alfworld_steps
            for n in args.sizes:
                runs = [(m, 0) for m in args.modes if m != "ray"]
                if "ray" in args.modes:
                    runs += [("ray", w) for w in args.ray_workers]
                    if not args.no_overhead and 1 not in args.ray_workers:
                        runs.append(("ray", 1))
                for mode, w in runs:
                    if mode == "async" and name == "alfworld" and n > args.alfworld_max_async:
                        print(f"skipping alfworld async with {n} env processes (--alfworld-max-async)",
                              flush=True)
                        continue
                    r = measure(name, n, mode, w, steps, args)
                    print(f"{r['env']:9s} {n:3d} envs {r['mode']:7s} {r['steps_per_s']:8.0f} env steps/s  "
                          f"{r['step_ms']:8.1f} ms/step  RSS {r['rss_mb']:.0f} MB x {r['procs']}", flush=True)
                    rows.append(r)
    finally:
        ray.shutdown()
    print()
    print(table(rows))
    if any(r["overhead_ms"] is not None for r in rows):
        print()
        print(overheads(rows))


if __name__ == "__main__":
    main()
