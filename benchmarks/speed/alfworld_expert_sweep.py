"""Expert sweep over ALFWorld games: does every game reset and get won by the expert through our env?

    flock /tmp/bipace-heavy.lock nice -n 5 python -m benchmarks.speed.alfworld_expert_sweep real \
        --data-dir ../shared/data/alfworld
    flock /tmp/bipace-heavy.lock nice -n 5 python -m benchmarks.speed.alfworld_expert_sweep generated \
        --per-task 100

``real`` plays every game of valid_seen and valid_unseen through ``ALFWorldEnv`` with the expert on;
``generated`` generates (or reuses from the cache) ``--per-task`` games per task type, timing generation
+ expert check of each (the generator only keeps games its expert wins, redrawing otherwise; the row
reports that check), and with ``--replay`` also plays each through ``ALFWorldEnv`` with another seed.
Prints won / total per task type, how often Fast Downward had to take over, and timings.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict


def _play(env, task_id: str, max_steps: int):
    t = time.perf_counter()
    obs, info = env.reset(seed=0, options={"task_id": task_id, "expert": True})
    steps, won = 0, info["won"]
    while not won and steps < max_steps and info["expert_action"] is not None:
        obs, r, won, trunc, info = env.step(info["expert_action"])
        steps += 1
    planner = info.get("expert_used_planner", False)
    return info["task_type"], bool(won), steps, planner, time.perf_counter() - t


def _generated_row(env, tid, gen_s):
    """Outcome of the generator's own check: the expert won ``walkthrough`` (else it would have raised)."""
    path = env.gamefile(tid)
    with open(path) as f:
        walk = json.load(f)["walkthrough"]
    with open(os.path.join(os.path.dirname(path), "traj_data.json")) as f:
        traj = json.load(f)
    return traj["task_type"], True, len(walk), traj["scene"]["expert"] == "planner", gen_s


def _worker(job):
    kind, kwargs, task_ids, max_steps, replay = job
    from bipace_envs.alfworld.env import ALFWorldEnv
    env = ALFWorldEnv(max_steps=max_steps + 1, **kwargs)
    out = []
    for tid in task_ids:
        gen_s, split = None, env.split
        try:
            if kind == "generated":
                t = time.perf_counter()
                env.gamefile(tid)
                gen_s = time.perf_counter() - t
                if not replay:
                    out.append((tid, split, gen_s) + _generated_row(env, tid, gen_s) + (None,))
                    continue
            out.append((tid, split, gen_s) + _play(env, tid, max_steps) + (None,))
        except Exception as e:  # report, don't hide
            task = tid.split("/")[2] if kind == "generated" else tid.split("/")[1].split("-")[0]
            out.append((tid, split, gen_s, task, False, 0, False, 0.0, f"{type(e).__name__}: {e}"))
    return out


def _run(kind, kwargs_list, workers, max_steps, replay=True):
    from bipace_envs.alfworld.env import ALFWorldEnv
    jobs = []
    for kwargs in kwargs_list:
        ids = ALFWorldEnv(**kwargs).task_ids
        jobs += [(kind, kwargs, ids[i:i + 10], max_steps, replay) for i in range(0, len(ids), 10)]
    t0 = time.perf_counter()
    if workers > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(workers) as pool:
            rows = []
            for rs in pool.imap_unordered(_worker, jobs):
                rows += rs
                print(f"  ... {len(rows)} games done, {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    else:
        rows = [r for job in jobs for r in _worker(job)]
    return rows, time.perf_counter() - t0


def _report(rows, wall):
    by = defaultdict(lambda: [0, 0, 0, 0.0, 0])
    for tid, split, gen_s, task, won, steps, planner, play_s, err in rows:
        b = by[f"{split}/{task}"]
        for j, value in enumerate((won, 1, planner, play_s, steps)):
            b[j] += value
        if err or not won:
            print(f"  NOT WON: {tid} {err or ''}")
    print(f"{'split/task type':44s} {'won':>9s} {'planner':>8s} {'avg steps':>9s} {'avg play s':>10s}")
    for k in sorted(by):
        w, n, p, s, st = by[k]
        print(f"{k:44s} {w:4d}/{n:<4d} {p:8d} {st / n:9.1f} {s / n:10.2f}")
    w, n = sum(b[0] for b in by.values()), sum(b[1] for b in by.values())
    print(f"{'total':44s} {w:4d}/{n:<4d}   wall {wall:.0f}s")
    slow = sorted(rows, key=lambda r: -r[7])[:3]
    print("slowest plays: " + ", ".join(f"{r[0]} {r[7]:.1f}s ({r[5]} steps, planner={r[6]})" for r in slow))
    gens = [g for _, _, g, *_ in rows if g is not None]
    if gens:
        gens.sort()
        print(f"generate+check per game: mean {sum(gens) / len(gens):.2f}s, "
              f"median {gens[len(gens) // 2]:.2f}s, "
              f"max {gens[-1]:.2f}s (0 when cached)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=["real", "generated"])
    p.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared",
                                                      "data", "alfworld"))
    p.add_argument("--splits", nargs="*", default=None)
    p.add_argument("--per-task", type=int, default=100)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=150)
    p.add_argument("--replay", action="store_true",
                   help="generated: also replay each game through ALFWorldEnv with the expert "
                        "(another seed); without it the row reports the generator's own expert check")
    args = p.parse_args(argv)
    if args.kind == "real":
        splits = args.splits or ["valid_seen", "valid_unseen"]
        kwargs_list = [dict(data_dir=args.data_dir, split=s) for s in splits]
    else:
        splits = args.splits or ["train"]
        kwargs_list = [dict(split=s, games_per_task=args.per_task, cache_dir=args.cache_dir) for s in splits]
    rows, wall = _run(args.kind, kwargs_list, args.workers, args.max_steps, args.replay)
    print(f"ALFWorld expert sweep: {args.kind} {splits}")
    _report(rows, wall)


if __name__ == "__main__":
    main()
