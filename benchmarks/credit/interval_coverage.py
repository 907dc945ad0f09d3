"""Coverage of the 95% intervals over goals of ``benchmarks/credit/intervals.py``, measured at 8 and at 30
goals on text MDPs whose true advantages dynamic programming gives exactly.

    python -m benchmarks.credit.interval_coverage [--reps 400 --pool 400 --goals 8 30 --reliability 0.6 \
        --boot 1000 --boot-t 200 --methods ... --mixed-only --out runs/interval_coverage]

The population: ``--pool`` M worlds (goals) of ``benchmarks/credit/text_mdp.py``, each rolled out G =
``--group-size`` times and solved by DP as in ``estimator_quality.py`` (its world, horizon, gamma and
mean_norm settings; BiGPO/BiPACE embed the observation with its ``bow`` featurizer at radius ``--eps``).
``--mixed-only`` pools only worlds whose G rollouts were both won and lost, the goals the real benchmark's
screen looks for; by default every world counts (at horizon 40, 6 in 10 worlds win all G rollouts, and
GRPO's advantage is 0 on every row of those). Every row gets the true A = Q_t(s, a) - V_t(s) and a noisy
truth A + N(0, se^2), se such that the reliability var(A) / var(A + noise) is ``--reliability`` (1 = the
exact A), standing in for the Monte-Carlo truth of ``advantage_accuracy.py``. The noise is drawn once for
the pool, never per rep: the real benchmark's MC truth is drawn once, and its estimand is the correlation
of an estimator with an MC truth of that noise level (attenuated by the noise), so a goal's noise is part
of the goal. A pool goal is then one draw of (goal, noise) and the population value of a metric is the
metric on the whole pool. (Simplification: the noise is independent per row, while MC rows of one state
share their estimate.) The estimators grpo, gigpo, pace, bigpo, bipace, ecpo are computed on each goal
alone, the batch a goal subset would be: on the whole pool, BiGPO/BiPACE's clusters of 18 of the 400 goals
differ from those of the goal alone (float32 sums put near-radius rows on the other side of eps depending
on the batch), so the pool's advantages are not those of a subset.

Metrics, as in the real report: pooled Pearson r of each estimator with the noisy truth over all rows;
within-goal r (mean over goals of the per-goal Pearson r; goals where it is undefined, a constant
estimate, are skipped); paired differences of pooled r: pace - gigpo, bigpo - gigpo, bipace - pace,
bipace - gigpo. Each is a function of per-goal sums (n, sum x, sum y, sum xy, sum x^2, sum y^2, and the
per-goal r), so a goal is handed to the intervals as one pseudo-row of its sums: the same interval as on
its rows, at the cost of a few additions (checked against the row-level metrics on one draw).

Each of ``--reps`` reps draws n goals from the pool without replacement (n in ``--goals``) and computes
the interval of every method in ``--methods``: ``jackknife_t``, ``jackknife_t_bounded`` (the same on the
logit scale of a correlation's range [-1, 1], differences left as they are: what the reports use),
``percentile_bootstrap`` (``--boot``
resamples), ``bootstrap_t`` and ``symmetric_bootstrap_t`` (``--boot-t`` resamples each). Coverage = share
of reps whose interval holds the population value. A rep without an interval (a within-goal r defined
on fewer than 2 of the goals) counts as a miss (``undefined``; ``coverage_defined`` leaves them out); an
unbounded one (a bootstrap-t where over 5% of the resamples have no spread: too few goals move the value)
covers, and ``unbounded`` counts them, since it says no more than that. Width = mean hi - lo over the
bounded intervals. A coverage over 400 reps has a Monte-Carlo SE of 0.011
at 0.95: one cell at 0.925 is no evidence, a column of them is.
Sampling without replacement from a finite pool makes every method slightly conservative (a variance
factor 1 - n/M: 0.93 at 30 of 400 goals). Seeds are fixed: the same flags give the same table.
Outputs in ``--out``: coverage.csv and coverage.json (one record per method x n x metric). The defaults
take about 3 minutes on one core, most of it in the two bootstrap-t intervals (n + 1 evaluations per
resample). The measured figures and the interval they chose are in docs/advantage-accuracy.md.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.credit.intervals import (bootstrap_t, goal_members, jackknife_t, percentile_bootstrap,
                                         symmetric_bootstrap_t)

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

ESTIMATORS = ("grpo", "gigpo", "pace", "bigpo", "bipace", "ecpo")
PAIRS = (("pace", "gigpo"), ("bigpo", "gigpo"), ("bipace", "pace"), ("bipace", "gigpo"))
METRIC_NAMES = ([f"pooled r {e}" for e in ESTIMATORS] + [f"within r {e}" for e in ESTIMATORS]
                + [f"pooled r {a} - {b}" for a, b in PAIRS])
METHODS = ("jackknife_t", "jackknife_t_bounded", "percentile_bootstrap", "bootstrap_t",
           "symmetric_bootstrap_t")
# each metric's range, for jackknife_t_bounded: correlations in [-1, 1]; differences are left on their own
# scale, as advantage_report scores them
_HALF_RANGE = np.array([1.0] * (2 * len(ESTIMATORS)) + [np.inf] * len(PAIRS))
METRIC_BOUNDS = (-_HALF_RANGE, _HALF_RANGE)
E = len(ESTIMATORS)
PAIR_A, PAIR_B = (np.array([ESTIMATORS.index(pair[k]) for pair in PAIRS]) for k in (0, 1))
# layout of a goal's sums: n, sum y, sum y^2, then per estimator sum x, sum x^2, sum xy, r * defined, defined
N, SY, SYY, X0 = 0, 1, 2, 3
N_SUMS = X0 + 5 * E
MAX_CHUNKS = 10                   # --mixed-only rolls out up to this many times --pool worlds


@dataclass
class Pool:
    """The finite population: per row its goal, true A, noisy truth and each estimator's advantage."""
    goal: np.ndarray              # (rows,) goal index 0..M-1, rows of a goal contiguous
    true: np.ndarray              # (rows,) exact A
    truth: np.ndarray             # (rows,) the truth the metrics use: A + noise
    advantages: np.ndarray        # (rows, E) one column per ESTIMATORS entry
    played: int                   # worlds rolled out to find the pool's goals


# ------------------------------------------------------------------------------------ the pool
def _rows_of(batch, rows: np.ndarray):
    """The StepBatch restricted to ``rows`` (every per-row field)."""
    from estimators import StepBatch
    kept = {}
    for f in dataclasses.fields(StepBatch):
        value = getattr(batch, f.name) if f.init else None
        if value is not None:
            kept[f.name] = np.asarray(value)[rows]
    return StepBatch(**kept)


def estimator_advantages(batch, gamma: float, eps: float) -> np.ndarray:
    from estimators import compute_advantages
    return np.stack([compute_advantages(batch, name, gamma=gamma, mode="mean_norm", eps=eps)
                     for name in ESTIMATORS], axis=1)


def mixed_outcomes(batch, rows: np.ndarray) -> bool:
    """Did the goal's rollouts (``rows``) end both won and lost?"""
    won = {}
    for t, r in zip(batch.traj_id[rows], batch.reward[rows]):
        won[t] = won.get(t, False) or r > 0
    return len(set(won.values())) == 2


def build_pool(args) -> Pool:
    """M worlds x G rollouts (with --mixed-only, the first M whose rollouts were both won and lost) with
    exact and noisy truths and every estimator's advantages."""
    import torch

    from benchmarks.credit.estimator_quality import BowFeaturizer, sample_batch
    torch.set_num_threads(1)
    world_args = argparse.Namespace(tasks=args.pool, group_size=args.group_size, horizon=args.horizon,
                                    rooms=args.rooms, stuck_prob=args.stuck_prob,
                                    paraphrases=args.paraphrases, gamma=args.gamma)
    featurize, goal, true, advantages, played = BowFeaturizer(), [], [], [], 0
    for chunk in range(MAX_CHUNKS):
        rng = np.random.default_rng([args.seed, 0, chunk])
        batch, chunk_true, _, texts, _ = sample_batch(rng, world_args)
        batch = batch.with_fields(embedding=featurize(texts))
        for rows in goal_members(batch.group_id):
            played += 1
            if args.mixed_only and not mixed_outcomes(batch, rows):
                continue
            # each goal alone: see the docstring
            advantages.append(estimator_advantages(_rows_of(batch, rows), args.gamma, args.eps))
            goal.append(np.full(len(rows), len(true)))
            true.append(chunk_true[rows])
            if len(true) == args.pool:
                break
        if len(true) == args.pool:
            break
    else:
        raise RuntimeError(f"only {len(true)} of {played} worlds had mixed outcomes, fewer than --pool "
                           f"{args.pool}: lower --pool or leave out --mixed-only")
    true = np.concatenate(true)
    se = np.sqrt(true.var() * (1.0 / args.reliability - 1.0))
    truth = true + se * np.random.default_rng([args.seed, 2]).standard_normal(len(true))
    return Pool(np.concatenate(goal), true, truth, np.concatenate(advantages), played)


# ------------------------------------------------------------------------------------ metrics
def _pearson(n, sx, sy, sxx, syy, sxy):
    """Pearson r from sums; NaN where x or y is constant (its variance is rounding noise of its sum of
    squares). Call under np.errstate(all="ignore")."""
    vx, vy = sxx - sx * sx / n, syy - sy * sy / n
    ok = (vx > 1e-12 * sxx) & (vy > 1e-12 * syy)
    return np.where(ok, (sxy - sx * sy / n) / np.sqrt(np.abs(vx * vy)), np.nan)


def goal_sums(pool: Pool) -> np.ndarray:
    """(M, N_SUMS) per-goal sums every metric is a function of (see the layout above)."""
    m = int(pool.goal.max()) + 1
    x, y = pool.advantages, pool.truth

    def add(values):
        return np.stack([np.bincount(pool.goal, weights=v, minlength=m) for v in np.atleast_2d(values.T)],
                        axis=1)
    n, sy, syy = (add(v)[:, 0] for v in (np.ones_like(y), y, y * y))
    sx, sxx, sxy = add(x), add(x * x), add(x * y[:, None])
    with np.errstate(all="ignore"):
        r = _pearson(n[:, None], sx, sy[:, None], sxx, syy[:, None], sxy)
    defined = np.isfinite(r)
    return np.column_stack([n, sy, syy, sx, sxx, sxy, np.where(defined, r, 0.0), defined])


def metrics_from_sums(s: np.ndarray) -> np.ndarray:
    """METRIC_NAMES from the sums of a set of goals (a goal counted twice is added twice); the last axis of
    ``s`` holds the sums, any leading axes are sets of goals."""
    sx, sxx, sxy, r_sum, defined = (s[..., X0 + k * E:X0 + (k + 1) * E] for k in range(5))
    n, sy, syy = s[..., N:N + 1], s[..., SY:SY + 1], s[..., SYY:SYY + 1]
    with np.errstate(all="ignore"):       # (the intervals call this ~10^4 times a rep: one errstate)
        pooled = np.nan_to_num(_pearson(n, sx, sy, sxx, syy, sxy))      # a constant estimate: 0, as corr()
        within = np.where(defined > 0, r_sum / defined, np.nan)
    return np.concatenate([pooled, within, pooled[..., PAIR_A] - pooled[..., PAIR_B]], axis=-1)


def metrics_from_rows(pool: Pool, goals: np.ndarray) -> np.ndarray:
    """METRIC_NAMES straight from the rows of ``goals`` (each once): the reference the sums must match."""
    from benchmarks.credit.advantage_metrics import corr
    rows = np.isin(pool.goal, goals)
    x, y, g = pool.advantages[rows], pool.truth[rows], pool.goal[rows]
    pooled = np.array([corr(x[:, k], y) for k in range(E)])
    within = []
    for k in range(E):
        per_goal = [np.corrcoef(x[g == h, k], y[g == h])[0, 1] for h in goals
                    if np.ptp(x[g == h, k]) > 0 and np.ptp(y[g == h]) > 0]
        within.append(np.mean(per_goal) if per_goal else np.nan)
    index = {e: i for i, e in enumerate(ESTIMATORS)}
    return np.concatenate([pooled, within, [pooled[index[a]] - pooled[index[b]] for a, b in PAIRS]])


# ------------------------------------------------------------------------------------ coverage
def intervals_of(sums: np.ndarray, methods: tuple[str, ...], boot: int, boot_t: int, seed: int
                 ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(lo, hi) of every method on the goals whose sums are the rows of ``sums`` (one pseudo-row each)."""
    members = [np.array([g]) for g in range(len(sums))]

    def stat(rows):
        return metrics_from_sums(sums[rows].sum(axis=0))

    out = {}
    if "jackknife_t" in methods:
        out["jackknife_t"] = jackknife_t(stat, members)[1:]
    if "jackknife_t_bounded" in methods:
        out["jackknife_t_bounded"] = jackknife_t(stat, members, bounds=METRIC_BOUNDS)[1:]
    if "percentile_bootstrap" in methods:
        out["percentile_bootstrap"] = percentile_bootstrap(stat, members, boot, seed=seed)
    if "bootstrap_t" in methods:
        out["bootstrap_t"] = bootstrap_t(stat, members, boot_t, seed=seed)[1:]
    if "symmetric_bootstrap_t" in methods:
        out["symmetric_bootstrap_t"] = symmetric_bootstrap_t(stat, members, boot_t, seed=seed)[1:]
    return out


def coverage(sums: np.ndarray, population: np.ndarray, n: int, args, methods: tuple[str, ...]) -> list[dict]:
    """One record per method x metric: coverage of ``population`` over ``args.reps`` draws of n goals."""
    rng = np.random.default_rng([args.seed, 3, n])
    counts = {m: {c: np.zeros(len(population)) for c in ("hits", "undefined", "unbounded")} for m in methods}
    widths = {m: [] for m in methods}
    for rep in range(args.reps):
        drawn = rng.choice(len(sums), n, replace=False)
        for m, (lo, hi) in intervals_of(sums[drawn], methods, args.boot, args.boot_t, seed=rep).items():
            undefined = np.isnan(lo) | np.isnan(hi)
            bounded = np.isfinite(lo) & np.isfinite(hi)
            counts[m]["hits"] += ~undefined & (lo <= population) & (population <= hi)
            counts[m]["undefined"] += undefined
            counts[m]["unbounded"] += ~undefined & ~bounded
            widths[m].append(np.where(bounded, hi - lo, np.nan))
    records = []
    for m in methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)          # a metric never bounded: NaN width
            width = np.nanmean(np.array(widths[m]), axis=0)
        c = counts[m]
        for k, metric in enumerate(METRIC_NAMES):
            records.append({"method": m, "goals": n, "metric": metric, "population": float(population[k]),
                            "coverage": float(c["hits"][k] / args.reps), "width": float(width[k]),
                            "coverage_defined": float(c["hits"][k] / max(args.reps - c["undefined"][k], 1)),
                            "undefined": int(c["undefined"][k]), "unbounded": int(c["unbounded"][k]),
                            "reps": args.reps})
    return records


def table(records: list[dict], methods: tuple[str, ...], goals: list[int]) -> str:
    cols = [(m, n) for m in methods for n in goals]
    head = "| metric | population | " + " | ".join(f"{m} n={n}" for m, n in cols) + " |"
    lines = ["coverage (mean width of the bounded intervals) of the nominal 95% intervals; uK: K reps gave "
             "no interval (misses); infK: K reps gave an unbounded one (covers)", "", head,
             "|" + "---|" * (len(cols) + 2)]
    by = {(r["method"], r["goals"], r["metric"]): r for r in records}

    def cell(r):
        return (f"{r['coverage']:.3f} ({r['width']:.3f})" + (f" u{r['undefined']}" if r["undefined"] else "")
                + (f" inf{r['unbounded']}" if r["unbounded"] else ""))
    for metric in METRIC_NAMES:
        cells = [cell(by[m, n, metric]) for m, n in cols]
        population = by[cols[0] + (metric,)]["population"]
        lines.append(f"| {metric} | {population:.3f} | " + " | ".join(cells) + " |")
    lines.append("| **lowest** | | " + " | ".join(
        f"**{min(by[m, n, k]['coverage'] for k in METRIC_NAMES):.3f}**" for m, n in cols) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/interval_coverage", help="output folder (coverage.csv, .json)")
    p.add_argument("--reps", type=int, default=400, help="goal draws per number of goals")
    p.add_argument("--pool", type=int, default=400, help="M: worlds (goals) in the finite population")
    p.add_argument("--goals", type=int, nargs="+", default=[8, 30], help="goals per draw (n)")
    p.add_argument("--reliability", type=float, default=0.6,
                   help="var(A) / var(noisy truth) of the truth the metrics use (1 = exact A)")
    p.add_argument("--boot", type=int, default=1000, help="percentile bootstrap resamples")
    p.add_argument("--boot-t", type=int, default=200, help="resamples of both bootstrap-t intervals")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS), help="intervals measured")
    p.add_argument("--mixed-only", action="store_true",
                   help="pool only worlds whose G rollouts were both won and lost (the goals "
                        "advantage_accuracy's screen looks for); default: every world")
    p.add_argument("--group-size", type=int, default=8, help="G: rollouts per world")
    p.add_argument("--horizon", type=int, default=40, help="max steps per episode")
    p.add_argument("--rooms", type=int, default=5, help="rooms per world")
    p.add_argument("--stuck-prob", type=float, default=0.15, help="chance that a door sticks")
    p.add_argument("--paraphrases", type=int, default=4, help="templates per sentence drawn per visit")
    p.add_argument("--gamma", type=float, default=0.95, help="discount (estimators and DP)")
    p.add_argument("--eps", type=float, default=0.1, help="BiGPO/BiPACE cosine radius on the bow features")
    p.add_argument("--seed", type=int, default=0)
    return p


def check_args(args) -> None:
    for name in ("reps", "pool", "group_size", "horizon", "paraphrases", "boot"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if args.boot_t < 1 and any("bootstrap_t" in m for m in args.methods):
        raise ValueError(f"--boot-t must be >= 1 for the bootstrap-t intervals (or leave them out of "
                         f"--methods); got {args.boot_t}")
    if not 0 < args.reliability <= 1:
        raise ValueError(f"--reliability must be in (0, 1] (1 = exact truth); got {args.reliability}")
    bad = [n for n in args.goals if not 2 <= n <= args.pool]
    if bad:
        raise ValueError(f"--goals must lie in 2..--pool ({args.pool}) to give an interval; got {bad}")


def run(args) -> list[dict]:
    check_args(args)
    t0 = time.perf_counter()
    pool = build_pool(args)
    sums = goal_sums(pool)
    population = metrics_from_sums(sums.sum(axis=0))
    probe = np.random.default_rng([args.seed, 4]).choice(args.pool, min(args.goals), replace=False)
    if not np.allclose(metrics_from_sums(sums[probe].sum(axis=0)), metrics_from_rows(pool, probe),
                       atol=1e-9, equal_nan=True):
        raise RuntimeError("metrics from per-goal sums differ from the row-level metrics: fix goal_sums")
    reliability = pool.true.var() / pool.truth.var()
    print(f"pool: {args.pool} goals x G={args.group_size} ({'mixed outcomes, ' if args.mixed_only else ''}"
          f"from {pool.played} worlds), {len(pool.goal)} rows, reliability of the truth {reliability:.3f}, "
          f"built in {time.perf_counter() - t0:.1f} s")
    methods = tuple(m for m in METHODS if m in args.methods)
    records = []
    for n in args.goals:
        t1 = time.perf_counter()
        records += coverage(sums, population, n, args, methods)
        print(f"n={n}: {args.reps} reps in {time.perf_counter() - t1:.1f} s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "coverage.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(records[0]))
        w.writeheader()
        w.writerows(records)
    setting = {k: v for k, v in vars(args).items() if k != "out"}
    (out / "coverage.json").write_text(json.dumps({"setting": setting, "rows": len(pool.goal),
                                                   "reliability": reliability, "records": records}, indent=1))
    print(table(records, methods, args.goals))
    print(f"Monte-Carlo SE of a coverage of 0.95 over {args.reps} reps: "
          f"{np.sqrt(0.95 * 0.05 / args.reps):.3f}")
    print(f"wrote {out / 'coverage.csv'}, {out / 'coverage.json'} in {time.perf_counter() - t0:.1f} s")
    return records


def main(argv=None) -> list[dict]:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
