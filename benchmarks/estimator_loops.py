"""Per-row Python loops of the spec-2 and verl outcome estimators (rloo, reinforce_pp, gagpo, graphhca,
gaca), the plain reference `benchmarks/estimator_speed.py` times the library against and the tests
compare it with. GraphHCA's success probabilities come from value iteration here (the library solves
the linear system), so the comparison also checks the solver.

Each loop takes the rows (dicts, see `estimator_speed.batch_to_rows`), the context `estimator_speed`
already computed (trajectories in step order, penalised returns, episode term) and the options.
"""
from __future__ import annotations

import math
from collections import defaultdict

from benchmarks.estimator_loops_3 import SPEC3_LOOPS
from benchmarks.loop_math import flat as _flat, key as _key, mean as _mean, norm as _norm


def loop_rloo(rows, ctx, o):
    episodes = defaultdict(dict)                     # group -> traj -> episode return
    for (g, t), members in ctx["trajs"].items():
        episodes[g][t] = sum(rows[i]["reward"] for i in members)
    out = []
    for r in rows:
        own = episodes[r["group"]][r["traj"]]
        others = [v for t, v in episodes[r["group"]].items() if t != r["traj"]]
        pen = o["invalid_penalty"] * (0 if r["valid"] else 1)
        if not others:
            a = own if o["singleton_episode"] == "raw" else 0.0
        elif _flat(list(episodes[r["group"]].values()), o["equal_tol"]):
            a = 0.0
        else:
            a = own - sum(others) / len(others)
        out.append(a - pen)
    return out


def loop_reinforce_pp(rows, ctx, o):
    ret = ctx["ret"]
    if len(ret) < 2 or _flat(ret, o["equal_tol"]):
        return [0.0] * len(ret)
    m = _mean(ret)
    var = sum((x - m) ** 2 for x in ret) / (len(ret) - 1)
    return [(x - m) / math.sqrt(var + 1e-8) for x in ret]


def _anchor_members(rows):
    members = defaultdict(list)
    for i, r in enumerate(rows):
        members[(r["group"], _key(r["anchor"]))].append(i)
    return members, [(r["group"], _key(r["anchor"])) for r in rows]


def loop_gagpo(rows, ctx, o):
    gamma, lam = o["gamma"], o.get("gae_lambda", 0.95)
    members, key = _anchor_members(rows)
    pen = [o["invalid_penalty"] * (0 if r["valid"] else 1) for r in rows]
    raw = [ctx["ret"][i] + pen[i] for i in range(len(rows))]          # un-penalised returns
    value = [_mean([raw[j] for j in members[key[i]]]) for i in range(len(rows))]
    adv = [0.0] * len(rows)
    for members_t in ctx["trajs"].values():
        running = 0.0
        for k in range(len(members_t) - 1, -1, -1):
            i = members_t[k]
            v_next = value[members_t[k + 1]] if k + 1 < len(members_t) else 0.0
            running = rows[i]["reward"] + gamma * v_next - value[i] + gamma * lam * running
            adv[i] = running
    adv = [a - p for a, p in zip(adv, pen)]
    pools = defaultdict(list)
    for i, r in enumerate(rows):
        pools[r["group"]].append(adv[i])
    out = [_norm(adv[i], pools[r["group"]], o["mode"], o["epsilon"], 1, o["equal_tol"], "raw")
           for i, r in enumerate(rows)]
    return out


def success_probabilities_by_iteration(rows, trajs, hca_gamma=0.95, tol=1e-13, max_iter=100_000):
    """p per (group, anchor) node by value iteration from p = 0 (spec-2 2.3), and the successor of each
    row ('SUCC', 'FAIL' or a node)."""
    edges = defaultdict(lambda: defaultdict(int))
    succ_of = {}
    for (g, _t), members in trajs.items():
        won = sum(rows[i]["reward"] for i in members) > 0
        for k, i in enumerate(members):
            u = (g, _key(rows[i]["anchor"]))
            last = k + 1 == len(members)
            v = ("SUCC" if won else "FAIL") if last else (g, _key(rows[members[k + 1]]["anchor"]))
            edges[u][v] += 1
            succ_of[i] = v
    p = {u: 0.0 for u in edges}
    for _ in range(max_iter):
        new = {}
        for u, out in edges.items():
            n = sum(out.values())
            new[u] = hca_gamma * sum(c * (1.0 if v == "SUCC" else 0.0 if v == "FAIL" else p[v])
                                     for v, c in out.items()) / n
        delta = max(abs(new[u] - p[u]) for u in p)
        p = new
        if delta < tol:
            break
    return p, succ_of


def loop_graphhca(rows, ctx, o):
    p, succ_of = success_probabilities_by_iteration(rows, ctx["trajs"], o.get("hca_gamma", 0.95))
    p_min, w = o.get("p_min", 1e-3), o.get("hca_weight", 0.5)
    out = []
    for i, r in enumerate(rows):
        v = succ_of[i]
        p_next = 1.0 if v == "SUCC" else 0.0 if v == "FAIL" else p[v]
        signal = math.log(max(p_next, p_min)) - math.log(max(p[(r["group"], _key(r["anchor"]))], p_min))
        out.append(ctx["episode"][i] + w * signal)
    return out


def loop_gaca(rows, ctx, o):
    members, key = _anchor_members(rows)
    ret = ctx["ret"]
    step = [_norm(ret[i], [ret[j] for j in members[key[i]]], o["mode"], o["epsilon"], 1, o["equal_tol"],
                  "zero") for i in range(len(rows))]
    alpha = [0.0] * len(rows)
    for traj in ctx["trajs"].values():
        scored = [i for i in traj if rows[i]["resp_len"] > 0 and rows[i]["valid"]]
        nll = {i: -rows[i]["old_logp_sum"] / rows[i]["resp_len"] for i in scored}
        if not scored:
            continue
        m = _mean(list(nll.values()))
        std = math.sqrt(sum((x - m) ** 2 for x in nll.values()) / len(scored))
        hi, lo = max(nll.values()), min(nll.values())
        flat = len(scored) < 2 or hi - lo <= 1e-9 * max(1.0, abs(hi))
        for i in scored:
            z = 0.0 if flat else (nll[i] - m) / (std + o["epsilon"])
            alpha[i] = 1.0 / (1.0 + math.exp(-z)) if len(members[key[i]]) >= 2 else 0.0
    return [(1 - a) * e + a * o["step_weight"] * s for a, e, s in zip(alpha, ctx["episode"], step)]


EXTRA_LOOPS = {"rloo": loop_rloo, "reinforce_pp": loop_reinforce_pp, "gagpo": loop_gagpo,
               "graphhca": loop_graphhca, "gaca": loop_gaca}
EXTRA_LOOPS.update(SPEC3_LOOPS)
# the upstream default mode of each (the library's registry says the same)
DEFAULT_MODES = {"graphhca": "mean_std_norm"}
