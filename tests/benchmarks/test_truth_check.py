"""The MC truth's check against dynamic programming (benchmarks/credit/truth_check.py): its exact pieces
agree with the DP of text_mdp, it runs end to end, and on a small setting the default standard error keeps
the two tests near their nominal rates while the old floor does not."""
import argparse
import json

import numpy as np
import pytest

from benchmarks.credit import truth_check
from benchmarks.credit.text_mdp import make_world, solve


def small_args(**changes):
    args = truth_check.build_parser().parse_args([])
    return argparse.Namespace(**{**vars(args), "goals": 3, "group_size": 4, **changes})


def test_exact_moments_and_play_agree_with_dp():
    """moments' V is text_mdp.solve's; 20,000 vectorised continuations from a few (t, s) have the DP mean
    and variance (within 4.5 of their standard errors)."""
    world = make_world(np.random.default_rng(5), n_rooms=5, stuck_prob=0.15)
    horizon, gamma = 12, 0.95
    V, M2 = truth_check.moments(world, horizon, gamma)
    assert np.allclose(V[:horizon], solve(world, horizon, gamma)[0]) and np.all(V[horizon] == 0)
    tables = truth_check.tables_of([world])
    rng = np.random.default_rng(6)
    for t, s in ((0, 2 * world.start), (5, 2 * world.key_room + 1), (3, 2 * world.key_room)):
        n = 20000
        where = (np.zeros(n, int), np.full(n, s), np.full(n, t))
        disc, won = truth_check.play(tables, *where, horizon, gamma, rng)
        var = M2[t, s] - V[t, s] ** 2
        assert abs(disc.mean() - V[t, s]) < 4.5 * np.sqrt(var / n) + 1e-12
        fourth = np.mean((disc - disc.mean()) ** 4)              # the sample variance's own SE needs it
        assert abs(disc.var(ddof=1) - var) < 4.5 * np.sqrt(max(fourth - var ** 2, 0) / n) + 1e-12
        assert np.all(disc[~won] == 0) and np.all(disc[won] > 0)


def test_the_exact_advantage_is_q_minus_v_and_a_key_is_one_state():
    """With doors that never stick, the row's truth r + gamma V(t+1, s') - V(t, s) is DP's Q - V; and every
    row's plan start sits at the row's own latent state and time."""
    b = truth_check.sample_batch(small_args(stuck_prob=0.0), np.random.default_rng(7))
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
    assert [(r["k"], r["rule"]) for r in records] == [(k, r) for k in (2, 5) for r in rules]
    saved = json.loads((tmp_path / "truth_check.json").read_text())
    assert saved["setting"]["k"] == [2, 5] and len(saved["records"]) == 6
    assert len(saved["per_batch"]["5"]) == 2
    assert len((tmp_path / "truth_check.csv").read_text().splitlines()) == 7
    out = capsys.readouterr().out
    assert "| K | SE rule |" in out and "K=5 pooled" in out


def test_bad_settings_are_refused(tmp_path):
    for argv, match in ((["--k", "1"], "--k"), (["--batches", "1"], "--batches"),
                        (["--rules", "beta"], "unknown SE rule"), (["--rules", "pooled:-1"], "NU")):
        with pytest.raises(ValueError, match=match):
            truth_check.main(argv + ["--out", str(tmp_path)])


def test_the_default_se_keeps_nominal_rates_on_a_small_setting(tmp_path):
    """48 worlds at K = 8 (SE of each rate about 0.3-0.7 points): the default rule's 2-SE miss rate and
    impurity null rate lie near 4.55% and 5%; the old floor's far below (so the check can tell)."""
    records = truth_check.main(["--batches", "6", "--goals", "8", "--k", "8", "--rules", "floor", "pooled",
                                "--out", str(tmp_path)])
    rate = {r["rule"]: r for r in records}
    assert 0.03 < rate["pooled"]["miss"] < 0.065 and 0.025 < rate["pooled"]["impure_null"] < 0.085
    assert rate["floor"]["miss"] < 0.015 and rate["floor"]["impure_null"] < 0.02
    assert rate["pooled"]["null_pass"] == 0.0           # true zeros here are hopeless rows: A_hat = 0 too
    assert abs(rate["pooled"]["rel_unbiased"] - rate["pooled"]["rel_true"]) < 0.06
