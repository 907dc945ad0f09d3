"""The MC truth's check against dynamic programming (benchmarks/credit/truth_check.py): its exact pieces
agree with the DP of text_mdp, it runs end to end, and on a small setting the default standard error keeps
the two tests near their nominal rates while the old floor does not; the strata truth (strata.py) beside it:
its conditioned first action, its exact expectation, and its reliability estimates and rates."""
import argparse
import json

import numpy as np
import pytest

from benchmarks.credit import truth_check
from benchmarks.credit.text_mdp import make_world, solve
from benchmarks.credit.truth_check_play import (first_action, moments, play, sample_batch,
                                                strata_continuations, strata_of, tables_of)


def small_args(**changes):
    args = truth_check.build_parser().parse_args([])
    return argparse.Namespace(**{**vars(args), "goals": 3, "group_size": 4, **changes})


def test_exact_moments_and_play_agree_with_dp():
    """moments' V is text_mdp.solve's; 20,000 vectorised continuations from a few (t, s) have the DP mean
    and variance (within 4.5 of their standard errors)."""
    world = make_world(np.random.default_rng(5), n_rooms=5, stuck_prob=0.15)
    horizon, gamma = 12, 0.95
    V, M2 = moments(world, horizon, gamma)
    assert np.allclose(V[:horizon], solve(world, horizon, gamma)[0]) and np.all(V[horizon] == 0)
    tables = tables_of([world])
    rng = np.random.default_rng(6)
    for t, s in ((0, 2 * world.start), (5, 2 * world.key_room + 1), (3, 2 * world.key_room)):
        n = 20000
        where = (np.zeros(n, int), np.full(n, s), np.full(n, t))
        disc, won = play(tables, *where, horizon, gamma, rng)
        var = M2[t, s] - V[t, s] ** 2
        assert abs(disc.mean() - V[t, s]) < 4.5 * np.sqrt(var / n) + 1e-12
        fourth = np.mean((disc - disc.mean()) ** 4)              # the sample variance's own SE needs it
        assert abs(disc.var(ddof=1) - var) < 4.5 * np.sqrt(max(fourth - var ** 2, 0) / n) + 1e-12
        assert np.all(disc[~won] == 0) and np.all(disc[won] > 0)


def test_the_exact_advantage_is_q_minus_v_and_a_key_is_one_state():
    """With doors that never stick, the row's truth r + gamma V(t+1, s') - V(t, s) is DP's Q - V; and every
    row's plan start sits at the row's own latent state and time."""
    b = sample_batch(small_args(stuck_prob=0.0), np.random.default_rng(7))
    solved = [solve(w, 40, 0.95) for w in b.worlds]
    q_minus_v = [solved[g][1][t, s, a] - solved[g][0][t, s] for g, t, s, a in b.row_where]
    assert np.allclose(b.a_true, q_minus_v)
    start = b.plan.row_start
    assert np.array_equal(b.start_world[start], b.row_where[:, 0])
    assert np.array_equal(b.start_t[start], b.row_where[:, 1])
    assert np.array_equal(b.start_state[start], b.row_where[:, 2])
    assert len(b.plan.starts) < len(start)                      # G episodes share s_0 (and more)


def test_runs_end_to_end_and_writes_its_outputs(tmp_path, capsys):
    records = truth_check.main(["--batches", "2", "--goals", "2", "--group-size", "3", "--k", "2", "5",
                                "--horizon", "12", "--out", str(tmp_path)])
    rules = ("floor", "pooled", "sample")
    expected = [(k, "plain", r) for k in (2, 5) for r in rules + ("strata",)]
    expected = [(k, "strata", "pooled") if r == "strata" else (k, t, r) for k, t, r in expected]
    assert [(r["k"], r["truth"], r["rule"]) for r in records] == expected
    saved = json.loads((tmp_path / "truth_check.json").read_text())
    assert saved["setting"]["k"] == [2, 5] and saved["setting"]["truths"] == ["plain", "strata"]
    assert len(saved["records"]) == 8
    assert len(saved["per_batch"]["5"]) == 2 and set(saved["per_batch"]["5"][0]) == {"plain", "strata"}
    assert len((tmp_path / "truth_check.csv").read_text().splitlines()) == 9
    for r in records:                        # K continuations per state (plain) or per stratum group
        assert r["continuations"] > 0 and r["continuations"] % r["k"] == 0
    out = capsys.readouterr().out
    assert "| K | truth | SE rule |" in out and "K=5 plain pooled" in out and "K=5 strata pooled" in out
    assert "| 5 | strata | " in out


def test_one_truth_alone(tmp_path):
    argv = ["--batches", "2", "--goals", "2", "--group-size", "3", "--k", "4", "--horizon", "12"]
    only = truth_check.main(argv + ["--truths", "strata", "--out", str(tmp_path / "s")])
    assert [(r["truth"], r["rule"]) for r in only] == [("strata", "pooled")]
    both = truth_check.main(argv + ["--out", str(tmp_path / "b")])
    assert only[0] == both[-1]                                 # its own random stream: the same draws
    plain = truth_check.main(argv + ["--truths", "plain", "--rules", "pooled", "--out", str(tmp_path / "p")])
    assert [(r["truth"], r["rule"]) for r in plain] == [("plain", "pooled")]
    assert plain[0]["miss"] == both[1]["miss"] and plain[0]["rel_unbiased"] == both[0]["rel_unbiased"]


def test_bad_settings_are_refused(tmp_path):
    for argv, match in ((["--k", "1"], "--k"), (["--batches", "1"], "--batches"),
                        (["--rules", "beta"], "unknown SE rule"), (["--rules", "pooled:-1"], "NU")):
        with pytest.raises(ValueError, match=match):
            truth_check.main(argv + ["--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        truth_check.build_parser().parse_args(["--truths", "exact"])


def test_the_default_se_keeps_nominal_rates_on_a_small_setting(tmp_path):
    """48 worlds at K = 8 (SE of each rate about 0.3-0.7 points): the default rule's 2-SE miss rate and
    impurity null rate lie near 4.55% and 5%; the old floor's far below (so the check can tell)."""
    records = truth_check.main(["--batches", "6", "--goals", "8", "--k", "8", "--rules", "floor", "pooled",
                                "--truths", "plain", "--out", str(tmp_path)])
    rate = {r["rule"]: r for r in records}
    assert 0.03 < rate["pooled"]["miss"] < 0.065 and 0.025 < rate["pooled"]["impure_null"] < 0.085
    assert rate["floor"]["miss"] < 0.015 and rate["floor"]["impure_null"] < 0.02
    assert rate["pooled"]["null_pass"] == 0.0           # true zeros here are hopeless rows: A_hat = 0 too
    assert abs(rate["pooled"]["rel_unbiased"] - rate["pooled"]["rel_true"]) < 0.06


# ------------------------------------------------------------------------------------ strata
def test_the_conditioned_first_action_avoids_the_recorded_one_in_proportion():
    """first_action never draws the excluded index (first, middle or last; u at 0 and just below 1 too)
    and draws the others as the policy renormalised over them."""
    world = make_world(np.random.default_rng(3), n_rooms=5, stuck_prob=0.15)
    tables = tables_of([world])
    s = 2 * world.key_room                                     # a state with a door or more, the key, look...
    pi, n_act = world.policy(s), len(world.actions(s))
    rng, n = np.random.default_rng(4), 20000
    for exclude in (0, n_act // 2, n_act - 1):
        u = np.concatenate([rng.random(n), [0.0, np.nextafter(1.0, 0)]])
        a = first_action(tables, np.zeros(len(u), int), np.full(len(u), s), u, np.full(len(u), exclude))
        assert not np.any(a == exclude) and a.min() >= 0 and a.max() < n_act
        want = np.where(np.arange(n_act) == exclude, 0.0, pi) / (1 - pi[exclude])
        got = np.bincount(a[:n], minlength=n_act) / n
        assert np.all(np.abs(got - want) <= 4.5 * np.sqrt(want * (1 - want) / n) + 1e-12)
    # -1 excludes nothing: the policy itself
    a = first_action(tables, np.zeros(n, int), np.full(n, s), rng.random(n), np.full(n, -1))
    assert np.all(np.abs(np.bincount(a, minlength=n_act) / n - pi) <= 4.5 * np.sqrt(pi * (1 - pi) / n))


def test_play_conditions_only_the_first_action():
    """One step before the horizon at the chest with the key: excluding 'open wooden chest' never wins; the
    same start without the exclusion does. Two steps before it, a win after a first other action remains."""
    world = make_world(np.random.default_rng(5), n_rooms=5, stuck_prob=0.15)
    tables, horizon, n = tables_of([world]), 10, 4000
    s = 2 * world.chest_room + 1
    chest = world.actions(s).index("open wooden chest")
    rng = np.random.default_rng(6)
    for t, wins in ((horizon - 1, False), (horizon - 2, True)):
        where = (np.zeros(n, int), np.full(n, s), np.full(n, t))
        _, won = play(tables, *where, horizon, 0.95, rng, exclude=np.full(n, chest))
        assert won.any() == wins
    _, won = play(tables, np.zeros(n, int), np.full(n, s), np.full(n, horizon - 1), horizon, 0.95, rng)
    assert won.any()


def test_conditioned_values_are_the_exact_rest_of_v():
    """Per row, pi Q(t, s, a) + (1 - pi) Qbar = V(t, s) and the second moments add up likewise (DP); the
    conditioned continuations' sample mean and variance match Qbar and its variance."""
    b = sample_batch(small_args(horizon=15), np.random.default_rng(8))
    V, Q = zip(*(solve(w, 15, 0.95) for w in b.worlds))
    M2 = [moments(w, 15, 0.95)[1] for w in b.worlds]
    g, t, s, a = b.row_where.T
    q = np.array([Q[gi][ti, si, ai] for gi, ti, si, ai in b.row_where])
    v = np.array([V[gi][ti, si] for gi, ti, si in zip(g, t, s)])
    assert np.allclose(b.row_pi, [b.worlds[gi].policy(si)[ai] for gi, si, ai in zip(g, s, a)])
    assert np.allclose(b.row_pi * q + (1 - b.row_pi) * b.row_qbar, v)
    m2 = np.array([M2[gi][ti, si] for gi, ti, si in zip(g, t, s)])
    rest = (1 - b.row_pi) * (b.row_qbar_var + b.row_qbar ** 2)
    assert np.all(rest <= m2 + 1e-9) and np.all(b.row_qbar_var >= 0)
    rng, n = np.random.default_rng(9), 20000
    for row in (0, len(b.reward) // 2, len(b.reward) - 2):
        gi, ti, si, ai = b.row_where[row]
        disc, _ = play(b.tables, np.full(n, gi), np.full(n, si), np.full(n, ti), 15, 0.95, rng,
                       exclude=np.full(n, ai))
        var = b.row_qbar_var[row]
        assert abs(disc.mean() - b.row_qbar[row]) < 4.5 * np.sqrt(var / n) + 1e-12
        fourth = np.mean((disc - disc.mean()) ** 4)
        assert abs(disc.var(ddof=1) - var) < 4.5 * np.sqrt(max(fourth - var ** 2, 0) / n) + 1e-12


def test_the_strata_expectation_is_the_exact_advantage_when_doors_never_stick():
    """strata.chain of the exact Qbar is DP's A on every row when transitions are deterministic (what
    strata.py assumes); when doors stick it is not: the recorded outcome stands in for Q(s, a)."""
    b = sample_batch(small_args(stuck_prob=0.0), np.random.default_rng(10))
    st = strata_of(b, 0.95)
    assert np.allclose(st.target, b.a_true)
    assert np.all(st.plan.row_stratum >= 0)                    # a softmax never gives pi = 1
    b = sample_batch(small_args(), np.random.default_rng(10))
    st = strata_of(b, 0.95)
    assert not np.allclose(st.target, b.a_true)


def test_strata_continuations_are_records_strata_py_reads():
    """K records per stratum with the fields stratum_stats reads; strata that differ only in the avoided
    action's outcome share one group's continuations; one group per distinct state and recorded action."""
    from benchmarks.credit.strata import stratum_stats
    b = sample_batch(small_args(), np.random.default_rng(11))
    st = strata_of(b, 0.95)
    store, played = strata_continuations(b, st, 4, 40, 0.95, np.random.default_rng(12))
    assert played == 4 * len(st.group_row) and len(st.group_row) <= len(st.plan.keys)
    assert set(store.samples) == set(st.plan.keys)
    for key, recs in store.samples.items():
        assert len(recs) == 4 and all(set(r) >= {"key", "disc", "won", "invalid"} and r["key"] == key
                                      and not r["invalid"] for r in recs)
    pairs = {(int(st.plan.row_state[r]), int(b.row_where[r, 3])) for r in st.group_row}
    assert len(pairs) == len(st.group_row)
    stats = stratum_stats(st.plan, store)
    assert np.all(stats.count == 4)
    same = st.group[:, None] == st.group[None, :]
    assert np.all(np.abs(stats.w_mean[:, None] - stats.w_mean[None, :])[same] == 0)


def test_the_strata_truth_keeps_its_promises_on_a_small_setting(tmp_path):
    """Doors that never stick, 48 worlds at K = 8: the strata's unbiased and split-half reliabilities lie
    near the true one, well above the plain truth's at about the same number of continuations, and its SE
    keeps both tests near nominal. With sticking doors its A is off by the recorded outcome (miss above
    'own', the miss against its own expectation)."""
    records = truth_check.main(["--batches", "6", "--goals", "8", "--k", "8", "--rules", "pooled",
                                "--stuck-prob", "0", "--out", str(tmp_path / "a")])
    plain, strata = records
    assert abs(strata["rel_unbiased"] - strata["rel_true"]) < 0.06
    assert abs(strata["rel_split_half"] - strata["rel_true"]) < 0.08
    assert strata["rel_true"] > plain["rel_true"] + 0.15
    assert strata["continuations"] < 1.2 * plain["continuations"]
    assert 0.03 < strata["miss"] < 0.065 and 0.025 < strata["impure_null"] < 0.085
    assert strata["miss_own"] == strata["miss"] and strata["null_pass"] == 0.0
    stuck = truth_check.main(["--batches", "6", "--goals", "8", "--k", "8", "--truths", "strata",
                              "--out", str(tmp_path / "b")])[0]
    assert 0.03 < stuck["miss_own"] < 0.07 and stuck["miss"] > stuck["miss_own"]
