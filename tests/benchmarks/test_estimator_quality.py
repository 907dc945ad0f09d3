"""The ground-truth MDPs (DP values vs Monte Carlo, aliasing), the featurizer, group statistics, and
one tiny run of benchmarks/credit/estimator_quality.py checked for the structure of its outputs."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from benchmarks.credit import estimator_quality as eq
from benchmarks.credit.group_stats import group_stats, step_groups
from benchmarks.credit.text_mdp import make_world, rollout, solve
from estimators import StepBatch

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_dp_values_match_monte_carlo():
    world = make_world(np.random.default_rng(3))
    horizon, gamma = 10, 0.9
    V, Q = solve(world, horizon, gamma)
    rng = np.random.default_rng(4)
    returns = [sum(gamma ** k * st["reward"] for k, st in enumerate(rollout(world, horizon, rng, 3)))
               for _ in range(3000)]
    se = np.std(returns) / np.sqrt(len(returns))
    assert abs(np.mean(returns) - V[0, 2 * world.start]) < 4 * se + 1e-9
    # V is the policy average of Q, and a step at the horizon's last position only sees its own reward
    s = 2 * world.start
    n = len(world.actions(s))
    assert V[3, s] == pytest.approx(world.policy(s) @ Q[3, s, :n])
    assert np.all(Q[horizon - 1][~np.isnan(Q[horizon - 1])] <= 10.0)


def test_first_step_action_value_matches_monte_carlo():
    world = make_world(np.random.default_rng(5), stuck_prob=0.3)
    horizon, gamma = 8, 0.95
    V, Q = solve(world, horizon, gamma)
    rng = np.random.default_rng(6)
    by_action = {}
    for _ in range(4000):
        steps = rollout(world, horizon, rng, 1)
        ret = sum(gamma ** k * st["reward"] for k, st in enumerate(steps))
        by_action.setdefault(steps[0]["action"], []).append(ret)
    s = 2 * world.start
    for a, rets in by_action.items():
        if len(rets) > 200:
            se = np.std(rets) / np.sqrt(len(rets))
            assert abs(np.mean(rets) - Q[0, s, a]) < 4 * se + 1e-9


def test_rendering_aliases_states_but_never_merges_two_states():
    rng = np.random.default_rng(0)
    texts_of, state_of = {}, {}
    for w in range(4):
        world = make_world(rng)
        for _ in range(20):
            for st in rollout(world, 15, rng, paraphrases=4):
                key = (w, st["state"])
                texts_of.setdefault(key, set()).add(st["obs"])
                assert state_of.setdefault((w, st["obs"]), st["state"]) == st["state"]
    assert max(len(t) for t in texts_of.values()) > 4        # one latent state, many surface texts
    # without paraphrases the only variation left is the history (feedback of the previous action)
    world = make_world(np.random.default_rng(1))
    plain = {}
    for _ in range(20):
        for st in rollout(world, 15, rng, paraphrases=1):
            plain.setdefault(st["state"], set()).add(st["obs"])
    for texts in plain.values():     # the text after the feedback sentence is fixed per state
        assert len({t.split(". ", 1)[1] for t in texts if not t.startswith("Your task")}) <= 1
    assert max(len(t) for t in plain.values()) > 1
    starts = {rollout(world, 5, rng, 4)[0]["obs"] for _ in range(10)}
    assert len(starts) == 1                                   # G rollouts share the first observation


def test_bow_featurizer_is_deterministic_unit_and_ignores_stop_words():
    f1, f2 = eq.BowFeaturizer(), eq.BowFeaturizer()
    a = f1(["You are in the kitchen. Doors lead to: pantry."])
    b = f2(["the kitchen, doors lead to pantry"])
    c = f1(["You are in the cellar. Doors lead to: pantry."])
    assert np.allclose(a, b)
    assert np.linalg.norm(a) == pytest.approx(1.0, abs=1e-6)
    assert 0.0 < float(a[0] @ c[0]) < 0.99


def test_group_stats_by_hand():
    batch = StepBatch(group_id=[0, 0, 0, 1, 1, 1], traj_id=[0, 1, 2, 0, 1, 2], step_idx=[0] * 6,
                      reward=[0.0] * 6, action_valid=[True] * 6, anchor=["a", "a", "b", "c", "d", "e"])
    codes = step_groups(batch, "gigpo")
    stats = group_stats(batch, codes)
    assert stats["singleton_rate"] == pytest.approx(4 / 6)
    assert stats["clusters_per_group"] == pytest.approx(5 / 2)
    assert stats["mean_group_size"] == pytest.approx(6 / 5)
    assert step_groups(batch, "grpo") is None
    assert np.isnan(group_stats(batch, None)["singleton_rate"])


def test_tiny_run_writes_table_csv_and_png(tmp_path):
    eps, sims = [0.1], [0.9]
    summary = eq.main(["--out", str(tmp_path), "--batches", "2", "--tasks", "3", "--group-size", "4",
                       "--horizon", "8", "--eps", *map(str, eps), "--sim-thresh", *map(str, sims)])
    labels = [v.label for v in eq.variants(eps, sims)]
    assert list(summary) == labels
    from estimators import available_estimators
    assert {v.estimator for v in eq.variants(eps, sims)} == set(available_estimators())
    with open(tmp_path / "quality.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["estimator", "batch", *eq.METRICS]
    assert len(rows) == 2 * len(labels)
    for r in rows:
        if r["estimator"] in ("grpo", "rloo", "reinforce_pp", "hcapo"):
            assert r["singleton_rate"] == "nan" and r["corr_step"] == "nan"
        else:
            assert 0.0 <= float(r["singleton_rate"]) <= 1.0
            assert -1.0 <= float(r["corr_step"]) <= 1.0
        assert -1.0 <= float(r["corr_total"]) <= 1.0
        if r["estimator"] in ("grpo", "hgpo", "rloo", "reinforce_pp", "gagpo", "graphhca", "gaca", "ecpo",
                              "progpo", "gated_bepo", "hcapo", "relace"):
            assert r["nmse_exact"] == "nan"           # no step term / not a normalisation of returns
        else:
            assert float(r["nmse_exact"]) >= 0.0
        if "[oracle]" in r["estimator"] or r["estimator"] in ("gigpo", "pace", "hgpo"):
            assert float(r["impure_rate"]) == 0.0     # exact hashes / latent one-hot never mix states
    table = (tmp_path / "summary.md").read_text().splitlines()
    body = [line for line in table if line.startswith("| ") and not line.startswith("| estimator")]
    assert [line.split("|")[1].strip() for line in body] == labels
    png = (tmp_path / "quality.png").read_bytes()
    assert png[:8] == PNG_MAGIC
    import matplotlib.image
    img = matplotlib.image.imread(tmp_path / "quality.png")
    assert img.shape[0] > 200 and img.shape[1] > 800


def test_step_term_uses_given_returns_within_each_step_group():
    batch = StepBatch(group_id=[0] * 4, traj_id=[0, 1, 2, 3], step_idx=[0] * 4, reward=[0.0, 0.0, 10.0, 0.0],
                      action_valid=[True] * 4, anchor=["a", "a", "b", "b"], action_key=["x", "y", "x", "x"])
    codes = step_groups(batch, "gigpo")
    exact = eq.step_term(batch, "gigpo", codes, returns=np.array([1.0, 3.0, 5.0, 5.0]), gamma=0.95,
                         mode="mean_norm")
    assert np.allclose(exact, [-1.0, 1.0, 0.0, 0.0])
    sampled = eq.step_term(batch, "gigpo", codes, gamma=0.95, mode="mean_norm")
    assert np.allclose(sampled, [0.0, 0.0, 5.0, -5.0])        # the rewards' own returns


def test_bad_arguments_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="--batches"):
        eq.main(["--out", str(tmp_path), "--batches", "0"])
    with pytest.raises(ValueError, match="paraphrases"):
        rollout(make_world(np.random.default_rng(0)), 5, np.random.default_rng(0), paraphrases=0)
    with pytest.raises(ValueError, match="n_rooms"):
        make_world(np.random.default_rng(0), n_rooms=2)
