"""95% intervals over goals for metrics computed on rows clustered by goal (a goal's rows are correlated),
that hold at the 6-30 goals a credit benchmark can afford.

    members = goal_members(groups)                                    # row indices of each goal
    point, lo, hi = symmetric_bootstrap_t(stat, members, 400)         # stat(rows) -> vector of metrics
    point, lo, hi = jackknife_t(stat, members)                        # n + 1 evaluations of stat
    point, lo, hi = jackknife_t(stat, members, bounds=(-1, 1))        # ... kept inside a metric's range
    lo, hi = percentile_bootstrap(stat, members, 2000)                # the old interval, for comparison only

``jackknife_t`` (what the credit reports use): leave-one-goal-out values, their jackknife SE, and
Student's t with n - 1 degrees of freedom around the all-goals value; with ``bounds``, a bounded metric
(a correlation, a share of rows) gets it on the logit scale of its range, so its interval stays inside.
``symmetric_bootstrap_t``: value -+ the 95% quantile of |t| over goal resamples x the all-goals jackknife
standard error, where t is a resample's value minus the value, over the resample's own jackknife SE
(n_boot x (distinct goals + 1) evaluations of ``stat``): the safer interval where goals of two kinds mix,
at n_boot times the jackknife's evaluations of ``stat``. ``bootstrap_t`` is
its equal-tailed form. ``benchmarks/credit/interval_coverage.py`` measures their coverage on
text MDPs, where dynamic programming gives the truth (figures in docs/advantage-accuracy.md): on goals that
are all alike the jackknife-t holds its 95%, but where goals of two kinds mix (won by every rollout, and
mixed), it falls to about 90% for pooled correlations at 8 goals, as do the equal-tailed bootstrap-t and,
lower, the percentile bootstrap; the symmetric bootstrap-t holds 93% there too. A paired difference of two
estimators is a ``stat`` that returns the difference, so it gets the same treatment.
"""
from __future__ import annotations

import warnings
from typing import Callable

import numpy as np

from benchmarks.stats import t975

Stat = Callable[[np.ndarray], np.ndarray]


def goal_members(groups) -> list[np.ndarray]:
    """Row indices of each goal (rollout group), in the order of the sorted goal ids."""
    _, inverse = np.unique(np.asarray(groups), return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(inverse[order]) != 0, True])
    return [order[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]


def _rows(members: list[np.ndarray], goals) -> np.ndarray:
    return np.concatenate([members[g] for g in goals])


def _check(members: list[np.ndarray], n_boot: int) -> None:
    if len(members) == 0:
        raise ValueError("an interval over goals needs at least one goal; got no members (goal_members of "
                         "an empty batch?)")
    if n_boot < 1:
        raise ValueError(f"n_boot (goal resamples) must be >= 1; got {n_boot}")


def _leave_one_out(stat: Stat, members: list[np.ndarray]) -> np.ndarray:
    n = len(members)
    return np.array([stat(_rows(members, [h for h in range(n) if h != g])) for g in range(n)], dtype=float)


def _se_of(loo: np.ndarray) -> np.ndarray:
    n = len(loo)
    return np.sqrt((n - 1) / n * np.sum((loo - loo.mean(axis=0)) ** 2, axis=0))


def jackknife_se(stat: Stat, members: list[np.ndarray]) -> np.ndarray:
    """Jackknife standard error over goals of every component of ``stat`` (NaN with fewer than 2 goals;
    NaN where a leave-one-out value is NaN)."""
    n = len(members)
    if n < 2:
        return np.full(np.shape(stat(_rows(members, range(n)))), np.nan)
    return _se_of(_leave_one_out(stat, members))


def _logit_of(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The logit of x's place in (lo, hi): -+inf on the bounds (2 atanh(x) for a correlation in (-1, 1))."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = (x - lo) / (hi - lo)
        return np.log(p) - np.log1p(-p)


def _from_logit(z: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo + (hi - lo) / (1.0 + np.exp(-z))


def jackknife_t(stat: Stat, members: list[np.ndarray], bounds=None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value on all goals, lower, upper): value -+ t(0.975, n - 1) x jackknife SE (NaN with one goal).

    ``bounds`` (lo, hi), scalars or one per component of ``stat`` (-+inf: unbounded), keeps a bounded
    metric's interval inside its range: the same jackknife-t on the logit of the value's place in (lo, hi)
    (Fisher's z for a correlation), mapped back, so it narrows toward a bound as a proportion's interval
    should. Where the value or a leave-one-out value lies on a bound (its logit is infinite), the interval
    is the plain one cut to the range. Coverage on text MDPs beside the plain one: interval_coverage.py."""
    _check(members, 1)
    point = np.asarray(stat(_rows(members, range(len(members)))), dtype=float)
    n = len(members)
    if n < 2:
        return point, point + np.nan, point + np.nan
    t = t975(n - 1)
    loo = _leave_one_out(stat, members)
    half = t * _se_of(loo)
    lower, upper = point - half, point + half
    if bounds is None:
        return point, lower, upper
    lo, hi = (np.broadcast_to(np.asarray(b, dtype=float), point.shape) for b in bounds)
    bounded = np.isfinite(lo) & np.isfinite(hi)
    z_point, z_loo = _logit_of(point, lo, hi), _logit_of(loo, lo, hi)
    on_scale = bounded & np.isfinite(z_point) & np.all(np.isfinite(z_loo), axis=0)
    with np.errstate(invalid="ignore"):
        z_half = t * _se_of(np.where(on_scale, z_loo, 0.0))
        cut_lower, cut_upper = np.where(bounded, np.maximum(lower, lo), lower), np.where(bounded, np.minimum(
            upper, hi), upper)
        lower = np.where(on_scale, _from_logit(z_point - z_half, lo, hi), cut_lower)
        upper = np.where(on_scale, _from_logit(z_point + z_half, lo, hi), cut_upper)
    return point, lower, upper


def _jackknife_se_of(stat: Stat, members: list[np.ndarray], goals: np.ndarray) -> np.ndarray:
    """``jackknife_se`` of the goal list ``goals`` (repeats allowed, as in a resample): leaving out either
    copy of a repeated goal gives the same value, so each distinct goal is evaluated once, weighted by its
    count."""
    distinct, counts = np.unique(goals, return_counts=True)
    n = len(goals)
    if n < 2:
        return np.full(np.shape(stat(_rows(members, goals))), np.nan)
    loo = []
    for d in distinct:
        rest = np.delete(goals, np.flatnonzero(goals == d)[0])
        loo.append(stat(_rows(members, rest)))
    loo = np.asarray(loo, dtype=float)
    w = counts[:, None] if loo.ndim > 1 else counts
    mean = np.sum(w * loo, axis=0) / n
    return np.sqrt((n - 1) / n * np.sum(w * (loo - mean) ** 2, axis=0))


def _studentised_resamples(stat: Stat, members: list[np.ndarray], n_boot: int, seed: int):
    """(value, its jackknife SE, t of every goal resample): t = (resampled value - value) / the resample's
    own jackknife SE. A resample whose SE is 0 (the goals in it that move the value are copies of one goal;
    in floats, rounding noise below 1e-9 x the SE) has t = -+inf, as in exact arithmetic; NaN where t is
    undefined (0 / 0, or a NaN value or SE)."""
    _check(members, n_boot)
    n = len(members)
    point = np.asarray(stat(_rows(members, range(n))), dtype=float)
    se = jackknife_se(stat, members)
    tiny = 1e-9 * np.where(np.isfinite(se), se, 0.0)
    rng = np.random.default_rng(seed)
    ts = []
    for _ in range(n_boot):
        goals = rng.integers(0, n, n)
        diff = np.asarray(stat(_rows(members, goals)), dtype=float) - point
        se_b = _jackknife_se_of(stat, members, goals)
        degenerate = se_b <= tiny
        with np.errstate(divide="ignore", invalid="ignore"):
            ts.append(np.where(~degenerate, diff / se_b,
                               np.where(np.abs(diff) > tiny, np.sign(diff) * np.inf, np.nan)))
    return point, se, np.array(ts)


def _order_statistic(values: np.ndarray, q: float, upper: bool) -> np.ndarray:
    """The q% quantile of every column ignoring NaN, as the order statistic at or beyond it on the side away
    from the centre (no interpolation, so an infinite t gives an unbounded end, not NaN); NaN for a column
    without values."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)        # all-NaN columns: the interval is undefined
        return np.nanpercentile(values, q, axis=0, method="higher" if upper else "lower")


def bootstrap_t(stat: Stat, members: list[np.ndarray], n_boot: int = 400, seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, lower, upper) of the studentised bootstrap over goals: the 2.5/97.5% quantiles of
    (resampled value - value) / its jackknife SE, scaled by the all-goals jackknife SE."""
    point, se, ts = _studentised_resamples(stat, members, n_boot, seed)
    q_lo, q_hi = _order_statistic(ts, 2.5, upper=False), _order_statistic(ts, 97.5, upper=True)
    with np.errstate(invalid="ignore"):                        # inf x 0 (a constant metric): NaN
        return point, point - q_hi * se, point - q_lo * se


def symmetric_bootstrap_t(stat: Stat, members: list[np.ndarray], n_boot: int = 400, seed: int = 0
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, lower, upper): value -+ the 95% quantile of |t| over goal resamples x the all-goals jackknife
    SE, t as in ``bootstrap_t``. The symmetric form keeps the bootstrap-t's wider multiplier where the
    value and its SE move together (few, unlike goals) without the equal-tailed form's unstable tails.
    Unbounded (-+inf) when over 5% of the resamples have SE 0: too few goals move the value."""
    point, se, ts = _studentised_resamples(stat, members, n_boot, seed)
    with np.errstate(invalid="ignore"):
        half = _order_statistic(np.abs(ts), 95, upper=True) * se
    return point, point - half, point + half


def percentile_bootstrap(stat: Stat, members: list[np.ndarray], n_boot: int = 2000, seed: int = 0
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The 2.5/97.5% percentiles of ``stat`` over goal resamples (the interval these benchmarks used to
    report; it undercovers with few goals)."""
    _check(members, n_boot)
    rng = np.random.default_rng(seed)
    n = len(members)
    vals = np.array([stat(np.concatenate([members[g] for g in rng.integers(0, n, n)]))
                     for _ in range(n_boot)], dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)        # all-NaN columns: the interval is undefined
        lo, hi = np.nanpercentile(vals, [2.5, 97.5], axis=0)
    return lo, hi
