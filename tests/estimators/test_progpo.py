"""ProGPO (spec-3 section 2): hand example, the reductions of 2.5 and the edge cases of 2.6."""
import numpy as np
import pytest

from estimators import StepBatch, compute_advantages, exact_anchor_groups, resolve_options
from estimators.gae import gae_advantages
from estimators.returns import discounted_returns
from estimators.progpo import history_keys, potentials, singleton_share, transition_credit

from .helpers import make_batch, random_batch

OFF = dict(progpo_semantic="off")


def three_paths():
    # A: s0 -a-> x, wins 10; B: s0 -b-> y, fails; C: z -c-> x, fails (x is shared by A and C)
    return make_batch([(0, [("s0", 0.0), ("x", 10.0)]), (0, [("s0", 0.0), ("y", 0.0)]),
                       (0, [("z", 0.0), ("x", 0.0)])], keys=["a", "go", "b", "go", "c", "go"])


def test_hand_example_singleton_credit():
    # gamma 0.5: R0 = A [5, 10], B [0, 0], C [0, 0]; sigma0^2 = 0.25 * 10^2 = 25
    # Phi(C1): its history levels hold only C1 (mean 0, v = 25), level 0 = {A1, C1} (mean 5, s^2 = 50,
    # v = 37.5) -> (0/25 + 5/37.5) / (1/25 + 1/37.5) = 2; Phi(C0) = 0 (z alone everywhere)
    b = three_paths()
    o = resolve_options("progpo", gamma=0.5, **OFF)
    phi = potentials(b, o)
    assert phi[5] == pytest.approx(2.0) and phi[4] == 0.0
    c = transition_credit(b, o)
    assert c[4] == pytest.approx(0.5 * 2.0) and c[5] == pytest.approx(-2.0)
    adv = compute_advantages(b, "progpo", gamma=0.5, **OFF)
    # C's rows are alone in their prefix groups: A^E (mean_norm: 0 - 10/3) + c
    np.testing.assert_allclose(adv[4:], [-10 / 3 + 1.0, -10 / 3 - 2.0])
    # A0 and B0 share the prefix (s0): A^peer = R - mean = +-2.5
    np.testing.assert_allclose(adv[[0, 2]], [10 - 10 / 3 + 2.5, -10 / 3 - 2.5])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_prefix_zero_eta_zero_is_gigpo(seed, mode):
    b = random_batch(np.random.default_rng(seed))
    np.testing.assert_allclose(compute_advantages(b, "progpo", progpo_prefix=0, progpo_eta=0.0, mode=mode),
                               compute_advantages(b, "gigpo", mode=mode), atol=1e-12)


def test_omega_zero_is_grpo():
    b = random_batch(np.random.default_rng(3))
    np.testing.assert_allclose(compute_advantages(b, "progpo", step_weight=0.0, mode="mean_std_norm"),
                               compute_advantages(b, "grpo", mode="mean_std_norm"))


@pytest.mark.parametrize("seed", range(5))
def test_one_level_is_gagpo_lambda_zero(seed):
    b = random_batch(np.random.default_rng(seed))
    c = transition_credit(b, resolve_options("progpo", progpo_depths=0, gamma=0.9, **OFF))
    np.testing.assert_allclose(c, gae_advantages(b, resolve_options("gagpo", gae_lambda=0.0, gamma=0.9)),
                               atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_telescoping(seed):
    b = random_batch(np.random.default_rng(seed), max_len=8)
    gamma = 0.9
    o = resolve_options("progpo", gamma=gamma)
    shaped = transition_credit(b, o) + 0.1 * ~b.action_valid
    phi = potentials(b, o)
    view = b.view
    lhs = np.bincount(view.traj, weights=gamma ** view.pos * shaped)
    first = view.pos == 0
    rhs = np.zeros(view.n_trajs)
    rhs[view.traj[first]] = (discounted_returns(b, gamma) - phi)[first]
    np.testing.assert_allclose(lhs, rhs, atol=1e-10)


def test_step_zero_from_one_observation_is_the_group_mean_baseline():
    b = make_batch([(0, [("start", 0.0), ("x", r)]) for r in (10.0, 0.0, 0.0, 10.0)], keys=["k"] * 8)
    step = compute_advantages(b, "progpo") - compute_advantages(b, "grpo", mode="mean_norm")
    ret0 = np.array([9.5, 0.0, 0.0, 9.5])
    np.testing.assert_allclose(step[::2], ret0 - ret0.mean())


def test_revisits_get_different_prefix_keys():
    b = make_batch([(0, [("s", 0.0), ("x", 0.0), ("s", 1.0)])], keys=["a", "b", "c"])
    prefix = history_keys(b, "full")
    assert prefix[0] != prefix[2]
    anchor = exact_anchor_groups(b)
    assert anchor[0] == anchor[2]


def test_all_fail_group_is_zero_and_lone_rows_get_minus_penalty():
    b = make_batch([(0, [("s", 0.0), ("x", 0.0)]), (0, [("s", 0.0), ("y", 0.0)])], keys=["a", "b", "c", "d"])
    np.testing.assert_allclose(compute_advantages(b, "progpo"), 0.0)
    # rows alone at every level: Phi = R0, so c = -pen
    b = make_batch([(0, [("p", 0.0), ("q", 10.0)]), (1, [("u", 0.0), ("v", 0.0)])], keys=list("abcd"),
                   invalid=(2,))
    np.testing.assert_allclose(transition_credit(b, resolve_options("progpo", **OFF)), [0, 0, -0.1, 0])


def test_singleton_share_and_semantic_levels():
    b = three_paths()
    assert singleton_share(b) == pytest.approx(4 / 6)
    # auto falls back to text anchors; an explicit embedding level without embeddings is an error
    assert np.all(np.isfinite(compute_advantages(b, "progpo")))
    with pytest.raises(ValueError, match=r"progpo.*needs StepBatch.embedding.*capture_hidden"):
        compute_advantages(b, "progpo", progpo_semantic="embedding")


def test_potential_loo_and_bad_options():
    b = random_batch(np.random.default_rng(1))
    assert np.all(np.isfinite(compute_advantages(b, "progpo", potential_loo=True)))
    with pytest.raises(ValueError, match="progpo_prefix"):
        compute_advantages(b, "progpo", progpo_prefix=-1)
    with pytest.raises(ValueError, match="progpo_depths"):
        compute_advantages(b, "progpo", progpo_depths=-1)
    with pytest.raises(ValueError, match="bootstrap_truncated=True needs max_steps"):
        compute_advantages(b, "progpo", bootstrap_truncated=True)
    with pytest.raises(ValueError, match="unknown progpo_semantic variant"):
        compute_advantages(b, "progpo", progpo_semantic="bert")


def test_missing_action_key():
    b = three_paths()
    b = StepBatch(b.group_id, b.traj_id, b.step_idx, b.reward, b.action_valid, anchor=b.anchor)
    with pytest.raises(ValueError, match=r"'progpo' needs StepBatch.action_key"):
        compute_advantages(b, "progpo")
