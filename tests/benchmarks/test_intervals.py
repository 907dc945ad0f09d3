"""The 95% intervals over goals of benchmarks/credit/intervals.py: grouping rows by goal, the jackknife-t
interval against the textbook t interval, coverage on a clustered model with a known correlation, and one
tiny run of benchmarks/credit/interval_coverage.py checked for the structure of its outputs."""
from __future__ import annotations

import csv
import json
import warnings

import numpy as np
import pytest

from benchmarks.credit import interval_coverage as ic
from benchmarks.credit.intervals import (_jackknife_se_of, bootstrap_t, goal_members, jackknife_se,
                                         jackknife_t, percentile_bootstrap, symmetric_bootstrap_t)
from benchmarks.stats import mean_ci95


def test_goal_members_holds_each_goals_rows_in_sorted_goal_order():
    groups = np.array(["b", "a", "c", "a", "b", "b", "c"], dtype=object)
    members = goal_members(groups)
    assert [groups[m[0]] for m in members] == ["a", "b", "c"]
    assert [m.tolist() for m in members] == [[1, 3], [0, 4, 5], [2, 6]]
    assert sorted(np.concatenate(members).tolist()) == list(range(len(groups)))


def test_jackknife_t_of_a_mean_over_equal_goals_is_the_t_interval_of_the_goal_means():
    rng = np.random.default_rng(1)
    for n_goals in (3, 8, 14):                        # tabled and Cornish-Fisher t quantiles
        groups = np.repeat(rng.permutation(n_goals) * 7, 5)   # goal ids not 0..n-1, rows not sorted
        x = rng.standard_normal(len(groups)) + 0.5 * rng.standard_normal(n_goals * 7)[groups]
        point, lo, hi = jackknife_t(lambda rows: np.array([x[rows].mean()]), goal_members(groups))
        means = [x[groups == g].mean() for g in np.unique(groups)]
        centre, half = mean_ci95(means)
        assert point[0] == pytest.approx(centre, abs=1e-12)
        assert (lo[0], hi[0]) == pytest.approx((centre - half, centre + half), abs=1e-12)


def clustered_sample(rng, n_goals: int, rows: int = 20, between: float = 0.6, within: float = 0.2):
    """Goal effects (u, v) with correlation ``between`` plus row noise with correlation ``within``, all of
    unit variance: the population Pearson r over rows is (between + within) / 2."""
    def pair(size, r):
        a = rng.standard_normal(size)
        return a, r * a + np.sqrt(1 - r * r) * rng.standard_normal(size)
    (u, v), (e, f) = pair(n_goals, between), pair(n_goals * rows, within)
    groups = np.repeat(np.arange(n_goals), rows)
    return groups, u[groups] + e, v[groups] + f


def pearson(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = x - x.mean(), y - y.mean()
    return np.array([x @ y / np.sqrt((x @ x) * (y @ y))])


def coverage_of(interval, n_goals: int, reps: int, per_row: bool = False) -> float:
    """Share of ``reps`` clustered samples whose 95% interval of the pooled r holds the population r 0.4;
    ``per_row`` hands the interval every row as its own goal (ignoring the clustering: a broken interval)."""
    rng, hits = np.random.default_rng(0), 0
    for _ in range(reps):
        groups, x, y = clustered_sample(rng, n_goals)
        members = [np.array([i]) for i in range(len(groups))] if per_row else goal_members(groups)
        lo, hi = interval(lambda rows: pearson(x[rows], y[rows]), members)
        hits += lo[0] <= 0.4 <= hi[0]
    return hits / reps


def jackknife(stat, members):
    return jackknife_t(stat, members)[1:]


def symmetric(stat, members):
    return symmetric_bootstrap_t(stat, members, n_boot=100, seed=len(members))[1:]


@pytest.mark.parametrize("interval, reps", [(jackknife, 300), (symmetric, 200)])
def test_interval_covers_a_pooled_correlation_at_six_goals(interval, reps):
    # a true coverage of 95% falls below 0.9 in 200 reps with probability ~1e-3
    assert coverage_of(interval, 6, reps) >= 0.9
    # the check has power: the interval over rows, ignoring that a goal's rows are correlated, fails it
    assert coverage_of(jackknife, 6, reps=60, per_row=True) < 0.8


def test_bootstrap_t_resample_se_counts_a_repeated_goal_once_per_copy():
    rng = np.random.default_rng(2)
    groups = np.repeat(np.arange(5), 4)
    x = rng.standard_normal(20)
    members = goal_members(groups)

    def stat(rows):
        return np.array([x[rows].mean(), np.median(x[rows])])
    for goals in ([0, 0, 3, 4, 4], [1, 1, 1, 2, 0], [2, 3, 4, 0, 1]):
        expected = jackknife_se(stat, [members[g] for g in goals])
        assert np.allclose(_jackknife_se_of(stat, members, np.array(goals)), expected, atol=1e-12)


def test_symmetric_bootstrap_t_is_centred_on_the_value():
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(6), 3)
    x = rng.standard_normal(18) + rng.standard_normal(6)[groups]
    point, lo, hi = symmetric_bootstrap_t(lambda rows: np.array([x[rows].mean()]), goal_members(groups),
                                          n_boot=60, seed=1)
    assert point[0] == pytest.approx(x.mean())
    assert np.isfinite([lo[0], hi[0]]).all() and hi[0] > lo[0]
    assert point[0] - lo[0] == pytest.approx(hi[0] - point[0])


@pytest.mark.parametrize("interval", [bootstrap_t, symmetric_bootstrap_t])
def test_bootstrap_t_is_unbounded_when_most_resamples_have_no_spread(interval):
    # a mean over the goals where a metric is defined (like a within-goal r): with 3 of 8 defined, a third
    # of the resamples hold copies of one defined goal, SE 0 in exact arithmetic (~1e-17 in floats): their
    # t is infinite, so no finite interval is honest; with 7 of 8 defined such resamples are rare
    def interval_of(values):
        def stat(rows):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                return np.array([np.nanmean(values[rows])])
        return interval(stat, goal_members(np.arange(8)), n_boot=200, seed=0)
    _, lo, hi = interval_of(np.array([0.1, 0.7, 0.3] + [np.nan] * 5))
    assert lo[0] == -np.inf and hi[0] == np.inf
    point, lo, hi = interval_of(np.array([0.1, 0.7, 0.3, 0.5, 0.2, 0.9, 0.4, np.nan]))
    assert lo[0] < point[0] < hi[0] and hi[0] - lo[0] < 3.0


@pytest.mark.parametrize("call, message", [
    (lambda stat, m: jackknife_t(stat, []), "at least one goal"),
    (lambda stat, m: symmetric_bootstrap_t(stat, m, n_boot=0), "n_boot"),
    (lambda stat, m: bootstrap_t(stat, m, n_boot=0), "n_boot"),
    (lambda stat, m: percentile_bootstrap(stat, m, n_boot=0), "n_boot")])
def test_intervals_reject_no_goals_and_no_resamples(call, message):
    x = np.arange(6.0)
    with pytest.raises(ValueError, match=message):
        call(lambda rows: np.array([x[rows].mean()]), goal_members([0, 0, 1, 1, 2, 2]))


def test_interval_coverage_writes_a_record_per_method_goals_and_metric(tmp_path, capsys):
    out = tmp_path / "cov"
    records = ic.main(["--out", str(out), "--pool", "6", "--group-size", "3", "--horizon", "12",
                       "--reps", "3", "--goals", "3", "5", "--boot", "20", "--boot-t", "4"])
    expected = {(m, n, k) for m in ic.METHODS for n in (3, 5) for k in ic.METRIC_NAMES}
    assert {(r["method"], r["goals"], r["metric"]) for r in records} == expected
    assert len(records) == len(expected)
    for r in records:
        assert 0.0 <= r["coverage"] <= r["coverage_defined"] <= 1.0 and r["reps"] == 3
        assert 0 <= r["undefined"] + r["unbounded"] <= 3
    with open(out / "coverage.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(records) and set(rows[0]) == set(records[0])
    saved = json.loads((out / "coverage.json").read_text())
    assert [(r["method"], r["goals"], r["metric"]) for r in saved["records"]] == \
        [(r["method"], r["goals"], r["metric"]) for r in records]
    assert saved["setting"]["pool"] == 6 and 0 < saved["reliability"] <= 1.5
    text = capsys.readouterr().out
    assert "jackknife_t n=3" in text and "symmetric_bootstrap_t n=5" in text
    assert "pooled r bipace - gigpo" in text


@pytest.mark.parametrize("flags, message", [(["--reliability", "0"], "--reliability"),
                                            (["--goals", "1"], "--goals"),
                                            (["--goals", "9"], "--goals"),
                                            (["--boot-t", "0"], "--boot-t")])
def test_interval_coverage_rejects_bad_settings(tmp_path, flags, message):
    with pytest.raises(ValueError, match=message):
        ic.main(["--out", str(tmp_path), "--pool", "8", *flags])


def share_stat(hits):
    return lambda rows: np.array([hits[rows].mean(), 3.0 * hits[rows].mean() - 1.0])


def test_bounded_jackknife_keeps_a_share_near_1_inside_its_range():
    """A share of 0.95 over 8 goals: the plain jackknife-t runs past 1, the bounded one (logit scale) stays
    inside, is asymmetric (shorter toward the bound) and keeps the value; a component bounded by -+inf is
    the plain interval."""
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(8), 10)
    hits = (rng.random(80) < 0.95).astype(float)
    hits[groups == 2] = [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]       # one poor goal: a wide interval
    members = goal_members(groups)
    point, lo, hi = jackknife_t(share_stat(hits), members)
    b_point, b_lo, b_hi = jackknife_t(share_stat(hits), members, bounds=([0.0, -np.inf], [1.0, np.inf]))
    assert hi[0] > 1.0                                        # what the leaderboard showed
    assert np.array_equal(b_point, point)
    assert 0.0 < b_lo[0] < point[0] < b_hi[0] < 1.0
    assert b_hi[0] - point[0] < point[0] - b_lo[0]
    assert (b_lo[1], b_hi[1]) == (lo[1], hi[1])


def test_bounded_jackknife_on_a_bound_cuts_the_plain_interval():
    """Leaving out the only goal with misses puts a leave-one-out share on 1 (an infinite logit): the plain
    interval cut to [0, 1]. A value on the bound with every goal there: the degenerate [1, 1]."""
    groups = np.repeat(np.arange(6), 5)
    hits = np.ones(30)
    hits[:2] = 0.0
    members = goal_members(groups)
    point, lo, hi = jackknife_t(share_stat(hits), members)
    _, b_lo, b_hi = jackknife_t(share_stat(hits), members, bounds=([0.0, -np.inf], [1.0, np.inf]))
    assert hi[0] > 1.0 and b_hi[0] == 1.0 and b_lo[0] == lo[0] > 0.0
    ones = jackknife_t(lambda rows: np.ones(30)[rows].mean(keepdims=True), members, bounds=(0.0, 1.0))
    assert [float(v[0]) for v in ones] == [1.0, 1.0, 1.0]


def test_bounded_jackknife_keeps_an_undefined_interval_undefined():
    groups = np.repeat(np.arange(4), 3)

    def stat(rows):
        return np.array([np.nan if len(set(groups[rows])) < 4 else 0.5])
    point, lo, hi = jackknife_t(stat, goal_members(groups), bounds=(0.0, 1.0))
    assert point[0] == 0.5 and np.isnan(lo[0]) and np.isnan(hi[0])


def test_report_intervals_stay_inside_each_metric_s_range():
    """A committed cell rescored: every interval of a score lies in its metric's range and every paired
    difference's in twice it (the committed scores.csv of the same inputs had sign agreement past 1)."""
    from pathlib import Path

    from benchmarks.credit.advantage_report import METRICS, RANGES, score
    from benchmarks.credit.score_inputs import ScoreInputs
    cell = Path(__file__).resolve().parents[2] / "docs/results/advantage-accuracy/alfworld-eps0.5"
    path = cell / "score_inputs.npz"
    inputs, _ = ScoreInputs.load(path)
    scored = score(inputs, "common")
    checked = 0
    for n in scored.names:
        for m, metric in enumerate(METRICS):
            low, high = RANGES[metric]
            if np.isfinite(scored.lo[n][m]):
                assert low <= scored.lo[n][m] <= scored.point[n][m] <= scored.hi[n][m] <= high, (n, metric)
                checked += 1
    assert checked > 50
    for r in scored.pairs:
        low, high = RANGES[r["metric"]]
        assert np.isnan(r["lo"]) or low - high <= r["lo"] <= r["diff"] <= r["hi"] <= high - low
