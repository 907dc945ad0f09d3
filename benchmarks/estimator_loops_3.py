"""Per-row Python loops of ECPO, ProGPO, Gated-BEPO (spec-3) and HCAPO, RELACE (spec-2 sections 4-5): the
plain references `benchmarks/estimator_speed.py` times the library against and the tests compare it with.
Gated-BEPO's node values come from value iteration here (the library solves the linear system), so the
comparison also checks the solver. Same calling convention as `benchmarks/estimator_loops.py`.
"""
from __future__ import annotations

import difflib
import math
from collections import defaultdict

START = ("<start>",)


def _helpers():
    from benchmarks.loop_math import flat, key, mean, norm
    return flat, key, mean, norm


def _pen(r, o):
    return o["invalid_penalty"] * (0 if r["valid"] else 1)


def _std(xs):
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / max(len(xs) - 1, 1))


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
    _flat, _key, _mean, _ = _helpers()
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
            act /= _std(rs) + o["epsilon"]
        between = sum(len(v) * (g_mean[u] - mu) ** 2 for u, v in by_action.items()) / len(members)
        within = sum((ret[j] - g_mean[_key(rows[j]["key"])]) ** 2 for j in members) / len(members)
        rho = math.tanh(len(members) / tau) * between / (between + within + o["epsilon"])
        out.append(ctx["episode"][i] + w * rho * act)
    return out


def _semantic(rows, ctx, eps):
    """BiGPO's greedy single pass (embeddings) or GiGPO's difflib first-fit at 0.9 (text anchors)."""
    _, _key, _, _ = _helpers()
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
    _flat, _key, _mean, _norm = _helpers()
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
                c /= _std(group_ret[r["group"]]) + o["epsilon"]
            step = eta * c
        out.append(ctx["episode"][i] + o["step_weight"] * step)
    return out


def loop_gated_bepo(rows, ctx, o, tol=1e-13, max_iter=100_000):
    _, _key, _, _norm = _helpers()
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
    _, _key, _, _norm = _helpers()
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


SPEC3_LOOPS = {"ecpo": loop_ecpo, "progpo": loop_progpo, "gated_bepo": loop_gated_bepo, "hcapo": loop_hcapo,
               "relace": loop_relace}
