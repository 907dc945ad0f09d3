"""Per-row Python loops of the estimators beyond the core six: the plain reference
``benchmarks/speed/estimator_speed.py`` times the library against and the tests compare it with.

    from benchmarks.speed.reference_loops import EXTRA_LOOPS, norm
    norm(1.0, [0.0, 1.0], "mean_norm", eps=1e-6, ddof=0, tol=1e-6, singleton="raw")   # 0.5

Sections: the loops' shared arithmetic; RLOO, REINFORCE++, GAGPO, GraphHCA, GACA (spec-2 and verl's
outcome estimators); ECPO, ProGPO, Gated-BEPO (spec-3) and HCAPO, RELACE (spec-2 sections 4-5).
GraphHCA's success probabilities and Gated-BEPO's node values come from value iteration here (the
library solves the linear systems), so the comparison also checks the solvers. Each loop takes the rows
(dicts, see ``estimator_speed.batch_to_rows``), the context ``estimator_speed`` already computed
(trajectories in step order, penalised returns, episode term) and the options. One module of about 430
lines on purpose: a loop per estimator, beside the arithmetic and helpers they share.
"""
from __future__ import annotations

import difflib
import math
from collections import defaultdict

import numpy as np

# ---------------- the loops' shared arithmetic


def key(v):
    if isinstance(v, np.ndarray):
        return tuple(v.ravel().tolist())
    return v


def mean(xs):
    return sum(xs) / len(xs)


def std(xs, ddof):
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / max(len(xs) - ddof, 1))


def flat(xs, tol):
    return tol is not None and len(xs) >= 2 and max(xs) - min(xs) <= tol * max(1.0, abs(max(xs)))


def norm(value, pool, mode, eps, ddof, tol, singleton):
    if len(pool) == 1:
        if singleton == "raw":
            return value / (1 + eps) if mode == "mean_std_norm" else value
        return 0.0
    if flat(pool, tol):
        return 0.0
    m = mean(pool)
    return (value - m) / (std(pool, ddof) + eps) if mode == "mean_std_norm" else value - m


# the loops name them with a leading underscore: several keep a local ``key``, ``flat`` or ``norm``
_key, _mean, _flat, _norm = key, mean, flat, norm


# ---------------- RLOO, REINFORCE++, GAGPO, GraphHCA, GACA

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


# ---------------- ECPO, ProGPO, Gated-BEPO (spec-3); HCAPO, RELACE (spec-2 sections 4-5)

START = ("<start>",)


def _pen(r, o):
    return o["invalid_penalty"] * (0 if r["valid"] else 1)


def _next_of(ctx):
    nxt = {}
    for members in ctx["trajs"].values():
        for a, b in zip(members, members[1:]):
            nxt[a] = b
    return nxt


def _success(rows, ctx):
    won = {}
    for members in ctx["trajs"].values():
        ok = sum(rows[i]["reward"] for i in members) > 0
        for i in members:
            won[i] = ok
    return won


def loop_ecpo(rows, ctx, o):
    kappa, tau, w = o.get("ecpo_kappa", 2.0), o.get("ecpo_tau", 4.0), o["step_weight"]
    ret = ctx["ret"]
    groups = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["group"], _key(r["anchor"]))].append(i)
    out = []
    for i, r in enumerate(rows):
        members = groups[(r["group"], _key(r["anchor"]))]
        rs = [ret[j] for j in members]
        if len(members) < 2 or _flat(rs, o["equal_tol"]):
            out.append(ctx["episode"][i])
            continue
        mu = _mean(rs)
        by_action = defaultdict(list)
        for j in members:
            by_action[_key(rows[j]["key"])].append(ret[j])
        g_mean = {u: _mean(v) for u, v in by_action.items()}
        same = by_action[_key(r["key"])]
        act = len(same) / (len(same) + kappa) * (g_mean[_key(r["key"])] - mu)
        if o["mode"] == "mean_std_norm":
            act /= std(rs, 1) + o["epsilon"]
        between = sum(len(v) * (g_mean[u] - mu) ** 2 for u, v in by_action.items()) / len(members)
        within = sum((ret[j] - g_mean[_key(rows[j]["key"])]) ** 2 for j in members) / len(members)
        rho = math.tanh(len(members) / tau) * between / (between + within + o["epsilon"])
        out.append(ctx["episode"][i] + w * rho * act)
    return out


def _semantic(rows, ctx, eps):
    """BiGPO's greedy single pass (embeddings) or GiGPO's difflib first-fit at 0.9 (text anchors)."""
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["group"], rows[i]["traj"], rows[i]["step"]))
    label, reps = {}, defaultdict(list)
    for i in order:
        g = rows[i]["group"]
        if rows[i]["emb"] is not None:
            e = [float(x) for x in rows[i]["emb"]]
            n = math.sqrt(sum(x * x for x in e))
            u = [x / n for x in e] if n > 0 else [0.0] * len(e)
            best, best_d = None, None
            for c in reps[g]:
                cn = math.sqrt(sum(x * x for x in c[0]))
                cos = sum(a * b for a, b in zip(u, c[0])) / cn if cn > 0 else 0.0
                if best_d is None or 1 - cos < best_d:
                    best, best_d = c, 1 - cos
            if best is not None and best_d <= eps:
                best[0] = [a + b for a, b in zip(best[0], u)]
                label[i] = best[1]
            else:
                reps[g].append([u, (g, len(reps[g]))])
                label[i] = (g, len(reps[g]) - 1)
        else:
            text = rows[i]["anchor"]
            hit = next((lab for rep, lab in reps[g]
                        if difflib.SequenceMatcher(None, text, rep).ratio() >= 0.9), None)
            if hit is None:
                hit = (g, len(reps[g]))
                reps[g].append((text, hit))
            label[i] = hit
    return label


def loop_progpo(rows, ctx, o):
    gamma, depth, eta = o["gamma"], o.get("progpo_depths", 2), o.get("progpo_eta", 1.0)
    ret = ctx["ret"]
    raw = [ret[i] + _pen(r, o) for i, r in enumerate(rows)]
    hist = {}
    for members in ctx["trajs"].values():
        for p, i in enumerate(members):
            hist[i] = [(_key(rows[j]["anchor"]), _key(rows[j]["key"])) for j in members[:p]]

    def key(i, d):
        if d is None:                     # the whole prefix
            past = hist[i]
        else:                             # the last d pairs, START-padded before the trajectory's start
            past = ([START] * max(0, d - len(hist[i])) + hist[i])[-d:] if d else []
        return (rows[i]["group"], d, tuple(past), _key(rows[i]["anchor"]))

    levels = [defaultdict(list) for _ in range(depth + 2)]      # depths D..0, then the semantic level
    prefix = defaultdict(list)
    sem = _semantic(rows, ctx, o.get("eps", 0.05))
    for i in range(len(rows)):
        prefix[key(i, None)].append(i)
        for k, d in enumerate(range(depth, -1, -1)):
            levels[k][key(i, d)].append(i)
        levels[-1][sem[i]].append(i)
    scale = defaultdict(float)
    for i, r in enumerate(rows):
        scale[r["group"]] = max(scale[r["group"]], abs(raw[i]))
    phi = []
    for i, r in enumerate(rows):
        prior = max(0.25 * scale[r["group"]] ** 2, 1e-8)
        seen, num, den = [], 0.0, 0.0
        cells = [levels[k][key(i, d)] for k, d in enumerate(range(depth, -1, -1))] + [levels[-1][sem[i]]]
        for cell in cells:
            if set(cell) in seen:
                continue
            seen.append(set(cell))
            xs = [raw[j] for j in cell]
            var = sum((x - _mean(xs)) ** 2 for x in xs) / (len(xs) - 1) if len(xs) > 1 else 0.0
            v = (var + prior) / len(xs)
            num, den = num + _mean(xs) / v, den + 1 / v
        phi.append(num / den)
    nxt = _next_of(ctx)
    group_ret = defaultdict(list)
    for i, r in enumerate(rows):
        group_ret[r["group"]].append(ret[i])
    out = []
    for i, r in enumerate(rows):
        members = prefix[key(i, None)]
        if len(members) >= 2:
            step = _norm(ret[i], [ret[j] for j in members], o["mode"], o["epsilon"], 1, o["equal_tol"],
                         "zero")
        else:
            c = r["reward"] + gamma * (phi[nxt[i]] if i in nxt else 0.0) - phi[i] - _pen(r, o)
            if o["mode"] == "mean_std_norm":
                c /= std(group_ret[r["group"]], 1) + o["epsilon"]
            step = eta * c
        out.append(ctx["episode"][i] + o["step_weight"] * step)
    return out


def loop_gated_bepo(rows, ctx, o, tol=1e-13, max_iter=100_000):
    gamma, lam = o.get("bepo_gamma", 0.95), o.get("gae_lambda", 0.95)
    nxt, won = _next_of(ctx), _success(rows, ctx)
    node = [(r["group"], _key(r["anchor"])) for r in rows]
    succ = [node[nxt[i]] if i in nxt else ("END", r["group"], won[i]) for i, r in enumerate(rows)]
    departures = defaultdict(list)
    for i in range(len(rows)):
        departures[node[i]].append(i)
    value = {u: 0.0 for u in departures}

    def v(u):
        return value.get(u, 0.0)          # END nodes are absorbing with V = 0
    for _ in range(max_iter):
        new = {u: sum(rows[i]["reward"] + gamma * v(succ[i]) for i in d) / len(d)
               for u, d in departures.items()}
        delta = max(abs(new[u] - value[u]) for u in value)
        value = new
        if delta < tol:
            break
    adv = [0.0] * len(rows)
    for members in ctx["trajs"].values():
        running = 0.0
        for i in reversed(members):
            running = rows[i]["reward"] + gamma * v(succ[i]) - value[node[i]] + gamma * lam * running
            adv[i] = running
    adv = [a - _pen(r, o) for a, r in zip(adv, rows)]
    pools = defaultdict(list)
    for i, r in enumerate(rows):
        pools[r["group"]].append(adv[i])
    k = {u: len({succ[i] for i in d}) for u, d in departures.items()}
    out = []
    for i, r in enumerate(rows):
        gb = 1 - 1 / k[node[i]] if k[node[i]] >= 2 else 0.0
        norm = _norm(adv[i], pools[r["group"]], o["mode"], o["epsilon"], 1, o["equal_tol"], "zero")
        out.append((1 - gb) * ctx["episode"][i] + gb * norm)
    return out


def _ratios(rows, ctx, o, scored_failures):
    won = _success(rows, ctx)
    rho = [1.0] * len(rows)
    for members in ctx["trajs"].values():
        if not won[members[0]] and (not scored_failures or
                                    any(math.isnan(rows[i]["hind_logp_sum"]) for i in members)):
            continue
        ell = []
        for i in members:
            n = rows[i]["resp_len"]
            d = (rows[i]["hind_logp_sum"] - rows[i]["old_logp_sum"]) / max(n, 1)
            ell.append(min(5.0, max(-5.0, d)) if n > 0 else 0.0)
        m = sum(math.exp(x) for x in ell) / len(ell)
        for i, x in zip(members, ell):
            rho[i] = math.exp(x) / m
    return rho, won


def _smooth_mask(values, rows, ctx, won):
    out = list(values)
    for members in ctx["trajs"].values():
        for p, i in enumerate(members):
            terms = [(0.5, values[i])]
            if p > 0:
                terms.append((0.25, values[members[p - 1]]))
            if p + 1 < len(members):
                terms.append((0.25, values[members[p + 1]]))
            out[i] = sum(w * x for w, x in terms) / sum(w for w, _ in terms)
            if won[i]:
                out[i] = max(out[i], 0.0)
    return out


def loop_hcapo(rows, ctx, o):
    rho, won = _ratios(rows, ctx, o, scored_failures=False)
    z = {}
    for members in ctx["trajs"].values():
        total = sum(rows[i]["reward"] for i in members)
        for i in members:
            z[i] = total if won[i] else 0.0
    q = [rho[i] * z[i] for i in range(len(rows))]
    pool = defaultdict(list)
    for i, r in enumerate(rows):
        pool[r["group"]].append(q[i])
    micro = [q[i] - sum(pool[r["group"]]) / len(pool[r["group"]]) for i, r in enumerate(rows)]
    micro = _smooth_mask(micro, rows, ctx, won)
    return [e + o["step_weight"] * m for e, m in zip(ctx["episode"], micro)]


def loop_relace(rows, ctx, o):
    f, won = _ratios(rows, ctx, o, scored_failures=True)
    weighted = [min(3.0, max(0.0, f[i])) * (ctx["ret"][i] + _pen(r, o)) - _pen(r, o)
                for i, r in enumerate(rows)]
    groups = defaultdict(list)
    for i, r in enumerate(rows):
        groups[(r["group"], _key(r["anchor"]))].append(weighted[i])
    local = [_norm(weighted[i], groups[(r["group"], _key(r["anchor"]))], o["mode"], o["epsilon"], 1,
                   o["equal_tol"], "zero") for i, r in enumerate(rows)]
    local = _smooth_mask(local, rows, ctx, won)
    return [e + o["step_weight"] * a for e, a in zip(ctx["episode"], local)]


# ---------------- registry: estimator name -> loop


SPEC3_LOOPS = {"ecpo": loop_ecpo, "progpo": loop_progpo, "gated_bepo": loop_gated_bepo, "hcapo": loop_hcapo,
               "relace": loop_relace}
EXTRA_LOOPS = {"rloo": loop_rloo, "reinforce_pp": loop_reinforce_pp, "gagpo": loop_gagpo,
               "graphhca": loop_graphhca, "gaca": loop_gaca, **SPEC3_LOOPS}
# the upstream default mode of each (the library's registry says the same)
DEFAULT_MODES = {"graphhca": "mean_std_norm"}
