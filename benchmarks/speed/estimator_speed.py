"""Estimator speed: each registered estimator against a plain per-row Python loop of the same maths.

    python -m benchmarks.speed.estimator_speed [--groups 16 --rollouts 8 --max-steps 50 --dim 1536]

The batch mimics a real one: G rollouts per task wander through a task-specific set of latent
states, each state rendered as an embedding plus small noise (so BiGPO finds real clusters), sparse
success reward 10, 5% invalid actions. The library and a per-row Python-loop implementation of the
same maths run side by side in this process on one thread. The loop is timed twice: with plain Python
lists for the embedding maths ("python loop", the plain reference) and with numpy for each vector
operation ("numpy loop", a stronger baseline). The loop implementation is also what the tests check
the library against.
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one CPU core, as the goal is stated; set before numpy loads

import argparse  # noqa: E402  (after the thread variables)
import math  # noqa: E402  (after the thread variables)
import time  # noqa: E402  (after the thread variables)
from collections import defaultdict  # noqa: E402  (after the thread variables)

import numpy as np  # noqa: E402  (after the thread variables)

from benchmarks.speed.reference_loops import (EXTRA_LOOPS, flat as _flat, key as _key,  # noqa: E402
                                              mean as _mean, norm as _norm)
from estimators import REGISTRY, StepBatch, available_estimators, compute_advantages  # noqa: E402

# ---------------------------------------------------------------- plain per-row loop implementation


def loop_advantages(rows, name, gamma=0.95, mode=None, step_weight=1.0, invalid_penalty=0.1,
                    epsilon=1e-6, cross_steps=True, singleton_episode="raw", equal_tol=1e-6, eps=0.05,
                    pace="q_style", history_length=2, length_weight_alpha=1.0, base_group=False,
                    vectors="numpy"):
    """rows: list of dicts with group, traj, step, reward, valid, anchor, key, emb.

    vectors: 'python' does the embedding maths with plain lists; 'numpy' uses numpy per vector
    (still one Python iteration per row and per centroid)."""
    if vectors == "python":
        dot = lambda a, b: sum(x * y for x, y in zip(a, b))  # noqa: E731
        add = lambda a, b: [x + y for x, y in zip(a, b)]  # noqa: E731
        scale = lambda a, c: [x * c for x in a]  # noqa: E731
    else:
        dot, add, scale = (lambda a, b: float(a @ b)), (lambda a, b: a + b), (lambda a, c: a * c)
    if mode is None:
        mode = REGISTRY[name].default_mode
    trajs = defaultdict(list)
    for i, r in enumerate(rows):
        trajs[(r["group"], r["traj"])].append(i)
    ret, score, pos = [0.0] * len(rows), [0.0] * len(rows), [0] * len(rows)
    for members in trajs.values():
        members.sort(key=lambda i: rows[i]["step"])
        running = 0.0
        for i in reversed(members):
            running = rows[i]["reward"] + gamma * running
            ret[i] = running
        total = sum(rows[i]["reward"] for i in members)
        for p, i in enumerate(members):
            pen = invalid_penalty * (0 if rows[i]["valid"] else 1)
            ret[i] -= pen
            score[i] = total - pen
            pos[i] = p
    pools = defaultdict(list)
    for i, r in enumerate(rows):
        if cross_steps or pos[i] == 0:
            pools[r["group"]].append(score[i])
    episode = [_norm(score[i], pools[r["group"]], mode, epsilon, 1, equal_tol, singleton_episode)
               for i, r in enumerate(rows)]
    if name == "grpo":
        return episode
    # rloo, reinforce_pp, gagpo, graphhca, gaca: benchmarks/speed/reference_loops.py (+ estimator_loops_3.py)
    if name in EXTRA_LOOPS:
        opts = dict(gamma=gamma, mode=mode, step_weight=step_weight, invalid_penalty=invalid_penalty,
                    epsilon=epsilon, equal_tol=equal_tol, singleton_episode=singleton_episode, eps=eps)
        return EXTRA_LOOPS[name](rows, {"trajs": trajs, "ret": ret, "episode": episode}, opts)
    if name == "hgpo":
        by_traj = {}
        for (g, t), members in trajs.items():
            for i in members:
                by_traj[i] = [rows[j]["anchor"] for j in members[:pos[i] + 1]]
        out = []
        levels = defaultdict(list)
        for i, r in enumerate(rows):
            for k in range(1, history_length + 2):
                if pos[i] >= k - 1:
                    levels[(r["group"], k, tuple(map(_key, by_traj[i][-k:])))].append(i)
        for i, r in enumerate(rows):
            items = [(0, episode[i])] if base_group else []
            for k in range(1, history_length + 2):
                if pos[i] >= k - 1:
                    members = levels[(r["group"], k, tuple(map(_key, by_traj[i][-k:])))]
                    if len(members) >= 2:
                        items.append((k, _norm(ret[i], [ret[j] for j in members], mode, epsilon, 0,
                                               equal_tol, "zero")))
            items = [(k, a) for k, a in items if a != 0]
            w = [(k + 1) ** length_weight_alpha for k, _ in items]
            out.append(sum(wk * a for wk, (_, a) in zip(w, items)) / sum(w) if items else 0.0)
        return out
    if name in ("gigpo", "pace"):
        cluster = [(r["group"], _key(r["anchor"])) for r in rows]
    elif name in ("gigpo_goal", "pace_goal"):      # one step group per goal
        cluster = [r["group"] for r in rows]
    else:  # bigpo, bipace: greedy single pass in canonical order
        cluster = [None] * len(rows)
        order = sorted(range(len(rows)), key=lambda i: (rows[i]["group"], rows[i]["traj"], rows[i]["step"]))
        cents = defaultdict(list)  # group -> [[sum vector, label]]
        for i in order:
            emb = rows[i]["emb"]
            e = list(map(float, emb)) if vectors == "python" else np.asarray(emb, np.float64)
            n = math.sqrt(dot(e, e))
            u = scale(e, 1.0 / n) if n > 0 else scale(e, 0.0)
            best, best_d = None, None
            for c in cents[rows[i]["group"]]:
                cn = math.sqrt(dot(c[0], c[0]))
                cos = dot(u, c[0]) / cn if cn > 0 else 0.0
                if best_d is None or 1 - cos < best_d:
                    best, best_d = c, 1 - cos
            if best is not None and best_d <= eps:
                best[0] = add(best[0], u)
                cluster[i] = best[1]
            else:
                label = (rows[i]["group"], len(cents[rows[i]["group"]]))
                cents[rows[i]["group"]].append([u, label])
                cluster[i] = label
    members = defaultdict(list)
    for i, c in enumerate(cluster):
        members[c].append(i)
    out = []
    for i, r in enumerate(rows):
        peers = members[cluster[i]]
        rs = [ret[j] for j in peers]
        if name in ("gigpo", "bigpo", "gigpo_goal"):
            step = _norm(ret[i], rs, mode, epsilon, 1, equal_tol, "zero")
        elif len(peers) < 2 or _flat(rs, equal_tol):
            step = 0.0
        elif pace == "q_style":
            same = [ret[j] for j in peers if _key(rows[j]["key"]) == _key(r["key"])]
            step = _mean(same) - _mean(rs)
        else:
            other = [ret[j] for j in peers if _key(rows[j]["key"]) != _key(r["key"])]
            step = ret[i] - _mean(other) if other else 0.0
        out.append(episode[i] + step_weight * step)
    return out


def batch_to_rows(batch: StepBatch) -> list[dict]:
    emb = list(batch.embedding) if batch.embedding is not None else [None] * len(batch)
    length = batch.resp_len if batch.resp_len is not None else np.zeros(len(batch), dtype=int)
    logp = batch.old_logp_sum if batch.old_logp_sum is not None else np.zeros(len(batch))
    hind = batch.hind_logp_sum if batch.hind_logp_sum is not None else np.full(len(batch), np.nan)
    return [dict(group=batch.group_id[i].item(), traj=batch.traj_id[i].item(), step=int(batch.step_idx[i]),
                 reward=float(batch.reward[i]), valid=bool(batch.action_valid[i]),
                 anchor=None if batch.anchor is None else batch.anchor[i],
                 key=None if batch.action_key is None else batch.action_key[i], emb=emb[i],
                 resp_len=int(length[i]), old_logp_sum=float(logp[i]), hind_logp_sum=float(hind[i]))
            for i in range(len(batch))]


# ---------------------------------------------------------------- synthetic batch


def synthetic_batch(groups=16, rollouts=8, max_steps=50, dim=1536, states=24, noise=0.01,
                    seed=0) -> StepBatch:
    """Rollouts that random-walk over `states` latent states per task; success ends an episode."""
    rng = np.random.default_rng(seed)
    cols = defaultdict(list)
    embs = []
    for g in range(groups):
        centres = rng.standard_normal((states, dim)).astype(np.float32)
        for t in range(rollouts):
            state = 0
            length = int(rng.integers(max_steps // 2, max_steps + 1))
            for s in range(length):
                won = state == states - 1
                cols["group"].append(g), cols["traj"].append(t), cols["step"].append(s)
                cols["reward"].append(10.0 if won else 0.0)
                cols["valid"].append(rng.random() > 0.05)
                cols["anchor"].append(f"task {g} state {state}")
                cols["key"].append(f"action {int(rng.integers(4))}")
                embs.append(centres[state] + noise * rng.standard_normal(dim).astype(np.float32))
                if won:
                    break
                state = int(min(states - 1, max(0, state + rng.integers(-1, 3))))
    n = len(cols["group"])
    length = rng.integers(1, 200, n)             # response tokens and their summed log-probs (GACA)
    old = -rng.gamma(2.0, 0.3, n) * length
    # HCAPO/RELACE: the hindsight pass's sums, a per-token shift of up to +-0.5 nats
    hind = old + rng.uniform(-0.5, 0.5, n) * length
    return StepBatch(np.array(cols["group"]), np.array(cols["traj"]), np.array(cols["step"]),
                     np.array(cols["reward"]), np.array(cols["valid"]),
                     anchor=np.array(cols["anchor"], dtype=object),
                     action_key=np.array(cols["key"], dtype=object), embedding=np.stack(embs),
                     resp_len=length, old_logp_sum=old, hind_logp_sum=hind)


def _time(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, default=16, help="rollout groups (tasks) in the batch")
    p.add_argument("--rollouts", type=int, default=8, help="rollouts per group (G)")
    p.add_argument("--max-steps", type=int, default=50, help="longest trajectory")
    p.add_argument("--dim", type=int, default=1536, help="embedding size (1536 = Qwen2.5-1.5B)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per estimator (best is reported)")
    p.add_argument("--loop-repeats", type=int, default=1, help="timed calls of the loop implementation")
    p.add_argument("--estimators", nargs="+", default=None, choices=available_estimators(), metavar="NAME",
                   help="time only these (default: every registered estimator)")
    args = p.parse_args(argv)
    batch = synthetic_batch(args.groups, args.rollouts, args.max_steps, args.dim)
    rows = batch_to_rows(batch)
    print(f"batch: {len(batch)} step rows ({args.groups} groups x {args.rollouts} rollouts x <= "
          f"{args.max_steps} steps), embeddings d={args.dim}, one thread")
    print(f"{'estimator':<13}{'library ms':>11}{'python loop ms':>16}{'ratio':>8}"
          f"{'numpy loop ms':>15}{'ratio':>8}{'max |diff|':>12}")
    for name in args.estimators or available_estimators():
        compute_advantages(batch, name)  # warm-up
        # a fresh copy per call: a batch caches its groupings' field codes, a training batch is used once
        copies = iter([batch.with_fields() for _ in range(args.repeats)])
        lib_s, lib = _time(lambda: compute_advantages(next(copies), name), args.repeats)
        py_s, py_ref = _time(lambda: loop_advantages(rows, name, vectors="python"), args.loop_repeats)
        np_s, np_ref = _time(lambda: loop_advantages(rows, name, vectors="numpy"), args.loop_repeats)
        diff = max(float(np.max(np.abs(lib - np.asarray(ref)))) for ref in (py_ref, np_ref))
        print(f"{name:<13}{lib_s * 1e3:>11.1f}{py_s * 1e3:>16.0f}{py_s / lib_s:>7.0f}x"
              f"{np_s * 1e3:>15.0f}{np_s / lib_s:>7.0f}x{diff:>12.1e}", flush=True)


if __name__ == "__main__":
    main()
