"""ECPO (spec-3 section 1): hand example, the reductions of 1.5 and the edge cases of 1.6."""
import math

import numpy as np
import pytest

from estimators import StepBatch, compute_advantages, resolve_options
from estimators.ecpo import action_advantage, divergent_anchor_share

from .helpers import make_batch, random_batch


def one_anchor(actions, rewards):
    """One group of one-step rollouts, all at anchor 's'."""
    return make_batch([(0, [("s", r)]) for r in rewards], keys=actions)


def test_hand_example_shrinks_a_one_sample_action_to_a_third():
    actions = ["a", "a", "a", "b", "b", "b", "b", "c"]
    rewards = [10, 10, 0, 0, 0, 0, 0, 10]
    mu = 30 / 8
    g = {"a": 20 / 3, "b": 0.0, "c": 10.0}
    n = {"a": 3, "b": 4, "c": 1}
    act = {u: n[u] / (n[u] + 2.0) * (g[u] - mu) for u in g}
    assert act["c"] == pytest.approx((10 - mu) / 3)                     # kappa = 2: a third of the raw gap
    between = sum(n[u] * (g[u] - mu) ** 2 for u in g) / 8
    within = (2 * (10 - 20 / 3) ** 2 + (0 - 20 / 3) ** 2) / 8
    rho = math.tanh(8 / 4) * between / (between + within + 1e-6)
    expected = [r - mu + rho * act[u] for u, r in zip(actions, rewards)]   # A^E in mean_norm: R - mean
    np.testing.assert_allclose(compute_advantages(one_anchor(actions, rewards), "ecpo"), expected)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_kappa_zero_gate_off_is_pace_q_style(seed, mode):
    b = random_batch(np.random.default_rng(seed))
    ecpo = compute_advantages(b, "ecpo", ecpo_kappa=0.0, ecpo_gate=False, mode=mode)
    pace = compute_advantages(b, "pace", pace="q_style", pace_std_norm=mode == "mean_std_norm", mode=mode)
    np.testing.assert_allclose(ecpo, pace, atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_kappa_zero_gate_off_distinct_actions_is_gigpo(seed, mode):
    b = random_batch(np.random.default_rng(seed))
    b = b.with_fields(action_key=np.arange(len(b)))
    np.testing.assert_allclose(compute_advantages(b, "ecpo", ecpo_kappa=0.0, ecpo_gate=False, mode=mode),
                               compute_advantages(b, "gigpo", mode=mode), atol=1e-12)


@pytest.mark.parametrize("opts", [dict(step_weight=0.0), dict(ecpo_kappa=math.inf)])
def test_no_step_term_is_grpo(opts):
    b = random_batch(np.random.default_rng(7))
    np.testing.assert_allclose(compute_advantages(b, "ecpo", mode="mean_std_norm", **opts),
                               compute_advantages(b, "grpo", mode="mean_std_norm"), atol=1e-12)


def test_repeated_actions_at_kappa_zero_are_not_gigpo():
    b = one_anchor(["a", "a", "b"], [10, 0, 0])
    episode = compute_advantages(b, "grpo", mode="mean_norm")
    ecpo = compute_advantages(b, "ecpo", ecpo_kappa=0.0, ecpo_gate=False) - episode
    gigpo = compute_advantages(b, "gigpo") - episode
    assert ecpo[0] == pytest.approx(ecpo[1]) == 5 - 10 / 3   # one shared G_{s,a} - mu_s for both 'a' rows
    assert gigpo[0] == pytest.approx(10 - 10 / 3) and gigpo[1] == pytest.approx(-10 / 3)


@pytest.mark.parametrize("seed", range(4))
def test_scaling_law_and_gate_bounds(seed):
    b = random_batch(np.random.default_rng(seed), rollouts=6)
    o0, o3 = (resolve_options("ecpo", ecpo_kappa=k, ecpo_gate=False) for k in (0.0, 3.0))
    a0, _ = action_advantage(b, o0)
    a3, _ = action_advantage(b, o3)
    key = np.array([f"{g}|{a}|{k}" for g, a, k in zip(b.group_id, b.anchor, b.action_key)])
    n_su = np.unique(key, return_counts=True)[1][np.unique(key, return_inverse=True)[1]]
    np.testing.assert_allclose(a3, n_su / (n_su + 3.0) * a0, atol=1e-12)
    _, rho = action_advantage(b, resolve_options("ecpo"))
    anchor = np.array([f"{g}|{a}" for g, a in zip(b.group_id, b.anchor)])
    n_s = np.unique(anchor, return_counts=True)[1][np.unique(anchor, return_inverse=True)[1]]
    assert np.all(rho >= 0) and np.all(rho < np.tanh(n_s / 4.0) + 1e-15)
    assert np.all(rho[n_s == 1] == 0)


def test_one_action_or_singleton_anchor_gives_the_episode_term_where_gigpo_does_not():
    b = make_batch([(0, [("s", 0.0), ("x", 10.0)]), (0, [("s", 0.0), ("y", 0.0)])], keys=["go"] * 4)
    ecpo = compute_advantages(b, "ecpo")
    np.testing.assert_allclose(ecpo, compute_advantages(b, "grpo", mode="mean_norm"))   # no action contrast
    assert not np.allclose(compute_advantages(b, "gigpo"), ecpo)                     # GiGPO: R - mu_s at s


def test_flat_group_and_invalid_rows():
    b = one_anchor(["a", "b", "c"], [5, 5, 5])
    np.testing.assert_allclose(compute_advantages(b, "ecpo"), 0.0)
    # invalid rows share the INVALID key: the penalty lowers their G and enters s_i
    b = make_batch([(0, [("s", 0.0)]), (0, [("s", 0.0)]), (0, [("s", 0.0)])],
                   keys=["<INVALID>", "<INVALID>", "a"], invalid=(0, 1))
    adv = compute_advantages(b, "ecpo")
    assert adv[0] == adv[1] < 0 < adv[2]


def test_divergent_anchor_share():
    assert divergent_anchor_share(one_anchor(["a", "a", "c"], [0, 0, 10])) == 1.0
    assert divergent_anchor_share(one_anchor(["a", "a", "c"], [10, 10, 0])) == 0.0


@pytest.mark.parametrize("opts,msg", [(dict(ecpo_kappa=-1.0), "ecpo_kappa"), (dict(ecpo_tau=0.0), "ecpo_tau"),
                                      (dict(ecpo_kappa=float("nan")), "ecpo_kappa")])
def test_bad_options(opts, msg):
    with pytest.raises(ValueError, match=msg):
        compute_advantages(one_anchor(["a", "b"], [1, 0]), "ecpo", **opts)


def test_missing_action_key_names_ecpo_and_how_to_make_it():
    b = one_anchor(["a", "b"], [1, 0])
    b = StepBatch(b.group_id, b.traj_id, b.step_idx, b.reward, b.action_valid, anchor=b.anchor)
    with pytest.raises(ValueError, match=r"'ecpo' needs StepBatch.action_key.*estimators.action_key"):
        compute_advantages(b, "ecpo")
