"""The MC truth's noise (benchmarks/credit/mc_noise.py) on constructed samples whose answer is known: the
reliability estimates, the split halves, disattenuation, and the standard-error rules."""
import numpy as np
import pytest

from benchmarks.credit import mc_noise
from benchmarks.credit.mc_noise import (NU0, Samples, disattenuate, noise_in_variance, row_advantage,
                                        split_half_reliability, start_se, start_stats, unbiased_reliability)
from benchmarks.credit.mc_truth import ContinuationStore, Episode, mc_truth, plan_starts, truth_of

GAMMA = 0.9


def one_step_plan(n):
    """n one-row episodes of distinct tasks: start j is row j's s_t, and A_j = r_j - V(s_j)."""
    return plan_starts([Episode(j, 0, ("a",), (), (j,)) for j in range(n)])


def shared_plan(goals=1, group=6):
    """Per goal, ``group`` two-row episodes sharing s_0 (one action each from it, then one more): the rows
    of a goal share V(s_0)'s error, and row 0's s_1 is row 1's s_t."""
    eps, row = [], 0
    for g in range(goals):
        for e in range(group):
            eps.append(Episode(g, 0, (f"x{e}", "y"), (), (row, row + 1)))
            row += 2
    return plan_starts(eps)


def draw(means, sds, k, rng):
    """K normal samples per start (means, sds per start), in an interleaved store order."""
    start = np.tile(np.arange(len(means)), k)
    x = means[start] + sds[start] * rng.standard_normal(len(start))
    return Samples(start, x, x, x > means[start], len(means))


def test_noise_free_continuations_are_fully_reliable():
    plan = one_step_plan(50)
    values = np.linspace(0, 5, 50)
    samples = draw(values, np.zeros(50), 8, np.random.default_rng(0))
    reward, valid = np.zeros(50), np.ones(50, bool)
    assert unbiased_reliability(plan, samples, reward, valid, GAMMA, 0.0) == pytest.approx(1.0)
    r, sb = split_half_reliability(plan, samples, reward, valid, GAMMA, 0.0)
    assert r == pytest.approx(1.0) and sb == pytest.approx(1.0)


def test_pure_noise_is_unreliable():
    """Every state has the same value: A does not vary, all spread of A_hat is noise (the estimates' own
    sampling error is about 0.01 at 20,000 rows)."""
    n = 20000
    plan = one_step_plan(n)
    samples = draw(np.full(n, 2.0), np.full(n, 3.0), 8, np.random.default_rng(1))
    reward, valid = np.zeros(n), np.ones(n, bool)
    assert abs(unbiased_reliability(plan, samples, reward, valid, GAMMA, 0.0)) < 0.05
    r, sb = split_half_reliability(plan, samples, reward, valid, GAMMA, 0.0)
    assert abs(r) < 0.05 and abs(sb) < 0.1


def test_reliability_recovers_a_known_share():
    """var(A) = 1 and noise sd^2 / K = 1: rho = 1/2; both estimates land on the batch's own var(A)/var(A_hat)
    (their error against it is about 0.01 at 20,000 rows)."""
    rng = np.random.default_rng(2)
    n, k = 20000, 8
    plan = one_step_plan(n)
    values = rng.standard_normal(n)
    samples = draw(values, np.full(n, np.sqrt(k)), k, rng)
    reward, valid = np.zeros(n), np.ones(n, bool)
    adv = row_advantage(plan, start_stats(samples), reward, valid, GAMMA, 0.0)[2]
    realised = np.var(values, ddof=1) / np.var(adv, ddof=1)
    assert realised == pytest.approx(0.5, abs=0.03)
    assert unbiased_reliability(plan, samples, reward, valid, GAMMA, 0.0) == pytest.approx(realised, abs=0.04)
    assert split_half_reliability(plan, samples, reward, valid, GAMMA, 0.0)[1] == pytest.approx(realised,
                                                                                                abs=0.05)


def test_the_noise_budget_is_unbiased_where_rows_share_states():
    """One goal's rows share V(s_0)'s error: var(A_hat) about the batch mean then holds less noise than the
    rows' summed variances say. var(A_hat) - D must average to var(A); the naive mean noise must not."""
    plan = shared_plan(goals=1, group=6)
    rng = np.random.default_rng(3)
    n_starts = len(plan.starts)
    means, sds = rng.uniform(0, 5, n_starts), rng.uniform(0.5, 3, n_starts)
    sds[plan.row_start[0]] = 6.0                                     # a noisy shared s_0
    reward, valid = np.zeros(len(plan.row_start)), np.ones(len(plan.row_start), bool)
    true_adv = GAMMA * mc_noise.next_values(plan.row_next, means) - means[plan.row_start]
    exact, naive = [], []
    for _ in range(3000):
        stats = start_stats(draw(means, sds, 4, rng))
        spread = np.var(row_advantage(plan, stats, reward, valid, GAMMA, 0.0)[2], ddof=1)
        exact.append(spread - noise_in_variance(plan, stats, GAMMA))
        naive.append(spread - np.mean(mc_noise.row_noise(plan, stats, GAMMA)))
    target, mc_se = np.var(true_adv, ddof=1), np.std(exact) / np.sqrt(len(exact))
    assert abs(np.mean(exact) - target) < 4 * mc_se
    assert abs(np.mean(naive) - target) > 8 * mc_se


def test_split_halves_are_disjoint_in_store_order():
    s = Samples(np.array([0, 1, 0, 0, 1, 1, 0]), np.arange(7.0), np.arange(7.0), np.zeros(7, bool), 2)
    h0, h1 = s.half(0), s.half(1)
    # start 0 sits at positions 0, 2, 3, 6 of the store, start 1 at 1, 4, 5: each one's 1st, 3rd, ... go left
    assert h0.v.tolist() == [0, 1, 3, 5] and h1.v.tolist() == [2, 4, 6]
    assert sorted(h0.v.tolist() + h1.v.tolist()) == list(range(7))


def test_disattenuate():
    assert disattenuate(0.3, 0.25) == pytest.approx(0.6)
    assert np.isnan(disattenuate(0.3, 0.0)) and np.isnan(disattenuate(0.3, -0.4))
    assert np.isnan(disattenuate(0.3, float("nan")))


def test_one_sample_per_state_is_refused():
    plan = one_step_plan(3)
    samples = Samples(np.array([0, 0, 1, 2, 2]), np.zeros(5), np.zeros(5), np.zeros(5, bool), 3)
    args = (np.zeros(3), np.ones(3, bool), GAMMA, 0.0)
    for f in (unbiased_reliability, split_half_reliability):
        with pytest.raises(ValueError, match="K >= 2"):
            f(plan, samples, *args)
    with pytest.raises(ValueError, match="K >= 2"):
        truth_of(plan, samples, *args)
    with pytest.raises(ValueError, match="unknown SE rule"):
        start_se("beta", start_stats(draw(np.zeros(3), np.ones(3), 2, np.random.default_rng(0))))
    with pytest.raises(ValueError, match="NU must be"):
        mc_noise.parse_rule("pooled:0")


def _store(plan, per_start):
    store = ContinuationStore.__new__(ContinuationStore)
    store.path, store.samples = None, {}
    for key, discs in zip(plan.keys, per_start):
        store.samples[key] = [{"key": key, "disc": d, "invalid": False, "won": d > 0} for d in discs]
    return store


def test_agreeing_samples_keep_a_pooled_standard_error():
    """A state whose K continuations all lose claims the pool's variance shrunk by its own K - 1 zero
    deviations: positive, and smaller than a state that shows the variance itself."""
    ep = Episode("g", 0, ("a", "b"), (), (0, 1))
    plan = plan_starts([ep])
    store = _store(plan, [[0.0] * 8, [10.0] * 7 + [0.0]])
    truth = mc_truth(plan, store, np.zeros(2), np.ones(2, bool), GAMMA, 0.0)
    var1 = np.var([10.0] * 7 + [0.0], ddof=1)
    pooled = (0 * 7 + var1 * 7) / 14
    assert truth.se_start[0] == pytest.approx(np.sqrt(NU0 * pooled / (NU0 + 7) / 8))
    assert truth.se_start[1] == pytest.approx(np.sqrt((NU0 * pooled + 7 * var1) / (NU0 + 7) / 8))
    assert 0 < truth.se_start[0] < truth.se_start[1]
    assert np.all(truth.se > 0)
    assert truth.noise_var[0] == pytest.approx(GAMMA ** 2 * var1 / 8)           # unfloored: s_0 adds nothing
    assert truth.noise_var[1] == pytest.approx(var1 / 8)


def test_a_batch_without_any_varying_state_still_has_standard_errors():
    """No state's samples vary (some all won, some all lost): the pool knows no scale, so the prior is the
    Beta(1, 1) pooled win rate's variance times the largest return; only a batch that never won anything
    (every value 0, as the old floor's scale) claims SE 0."""
    ep = Episode("g", 0, ("a", "b"), (), (0, 1))
    plan = plan_starts([ep])
    truth = mc_truth(plan, _store(plan, [[0.0] * 8, [9.0] * 8]), np.zeros(2), np.ones(2, bool), GAMMA, 0.0)
    p = (8 + 1) / (16 + 2)
    assert truth.se_start == pytest.approx(np.sqrt(NU0 * 81 * p * (1 - p) / (NU0 + 7) / 8))
    nothing = mc_truth(plan, _store(plan, [[0.0] * 8, [0.0] * 8]), np.zeros(2), np.ones(2, bool), GAMMA, 0.0)
    old = mc_truth(plan, _store(plan, [[0.0] * 8, [0.0] * 8]), np.zeros(2), np.ones(2, bool), GAMMA, 0.0,
                   se="floor")
    assert np.all(nothing.se == 0) and np.all(old.se == 0)


def test_pooled_keeps_the_mean_variance_and_orders_like_the_sample():
    """With equal K the shrinkage moves each variance toward the pool but keeps their mean (a reliability
    from these SEs keeps its budget), and a state with more sample variance keeps the larger SE."""
    rng = np.random.default_rng(4)
    samples = draw(rng.uniform(0, 3, 200), rng.uniform(0, 4, 200), 8, rng)
    stats = start_stats(samples)
    v_se, _ = start_se("pooled", stats)
    assert np.mean(v_se ** 2 * 8) == pytest.approx(np.mean(stats.v_var))
    order = np.argsort(stats.v_var)
    assert np.all(np.diff(v_se[order]) >= 0)
    assert np.ptp(v_se) < np.ptp(np.sqrt(stats.v_var / 8))
    floor_se, _ = start_se("floor", stats)
    assert np.all(floor_se >= np.sqrt(stats.v_var / 8))


def test_the_invalid_penalty_counts_in_v_not_in_w():
    """A continuation whose first action was invalid pays the penalty in V(s), not in W(s) (the value after
    the previous row's action): the two means and variances differ, and the store and drawn-samples paths
    agree."""
    ep = Episode("g", 0, ("a", "b"), (), (0, 1))
    plan = plan_starts([ep])
    store = _store(plan, [[0.0, 10.0, 0.0, 10.0], [5.0, 5.0, 0.0, 5.0]])
    for rec in store.samples[plan.keys[1]][:2]:
        rec["invalid"] = True
    samples = Samples.of(plan, store, invalid_penalty=2.0)
    assert samples.v.tolist() == [0, 10, 0, 10, 3, 3, 0, 5] and samples.w.tolist()[4:] == [5, 5, 0, 5]
    stats = start_stats(samples)
    assert stats.v_mean[1] == pytest.approx(11 / 4) and stats.w_mean[1] == pytest.approx(15 / 4)
    assert stats.vw_cov[1] == pytest.approx(np.cov([3, 3, 0, 5], [5, 5, 0, 5])[0, 1])
    reward, valid = np.zeros(2), np.array([True, False])
    truth = mc_truth(plan, store, reward, valid, GAMMA, 2.0)
    assert truth.q.tolist() == pytest.approx([GAMMA * 15 / 4, -2.0])
    assert truth.noise_var[0] == pytest.approx(stats.v_var[0] / 4 + GAMMA ** 2 * stats.w_var[1] / 4)
    assert unbiased_reliability(plan, store, reward, valid, GAMMA, 2.0) == pytest.approx(
        unbiased_reliability(plan, samples, reward, valid, GAMMA, 2.0))
    with pytest.raises(ValueError, match="the plan has 2"):
        one_start = Samples(np.array([0, 0]), np.zeros(2), np.zeros(2), np.zeros(2, bool), 1)
        truth_of(plan, one_start, reward, valid, GAMMA, 2.0)
