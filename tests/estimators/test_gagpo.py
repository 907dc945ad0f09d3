"""GAGPO (spec-2 section 1): a hand-computed example and the reductions of 1.6 / edge cases of 1.7."""
import numpy as np
import pytest

from estimators import StepBatch, compute_advantages, exact_anchor_groups

from .helpers import make_batch, random_batch

RAW = dict(gamma=0.5, gae_lambda=0.5, norm_scope="none")


def three_paths(invalid=()):
    # A: s0 -> x, wins 8; B: s0 -> y, fails; C: z -> x, fails (z is seen once, its next state x is shared)
    return make_batch([(0, [("s0", 0.0), ("x", 8.0)]), (0, [("s0", 0.0), ("y", 0.0)]),
                       (0, [("z", 0.0), ("x", 0.0)])], invalid=invalid)


def test_hand_example():
    # R = [4, 8 | 0, 0 | 0, 0]; V: s0 = 2, x = mean(8, 0) = 4, y = 0, z = 0
    # delta = r + 0.5 V' - V: A [0, 4], B [-2, 0], C [2, -4]; GAE with 0.25: A [1, 4], B [-2, 0], C [1, -4]
    np.testing.assert_allclose(compute_advantages(three_paths(), "gagpo", **RAW), [1, 4, -2, 0, 1, -4])
    # the default scope centres within the episode group (mean here is 0), std-normalised on request
    np.testing.assert_allclose(compute_advantages(three_paths(), "gagpo", gamma=0.5, gae_lambda=0.5),
                               [1, 4, -2, 0, 1, -4])
    std = np.std([1, 4, -2, 0, 1, -4], ddof=1)
    np.testing.assert_allclose(compute_advantages(three_paths(), "gagpo", gamma=0.5, gae_lambda=0.5,
                                                  mode="mean_std_norm"),
                               np.array([1, 4, -2, 0, 1, -4]) / (std + 1e-6))


def test_singleton_state_gets_signal_from_the_shared_next_state():
    adv = compute_advantages(three_paths(), "gagpo", **RAW)
    assert adv[4] == pytest.approx(1.0)                       # z is alone in its anchor group
    gigpo_step = compute_advantages(three_paths(), "gigpo", gamma=0.5) - compute_advantages(
        three_paths(), "grpo", gamma=0.5, mode="mean_norm")
    assert gigpo_step[4] == 0.0                               # where GiGPO gives 0


def test_penalty_after_gae_and_out_of_the_values():
    adv = compute_advantages(three_paths(invalid=(3,)), "gagpo", invalid_penalty=0.1, **RAW)
    np.testing.assert_allclose(adv, [1, 4, -2, -0.1, 1, -4])  # B's first row is untouched


def test_loo_value_proxy_and_truncation_bootstrap():
    # loo: V(A0) = R(B0) = 0, V(B0) = R(A0) = 4, V(A1) = R(C1) = 0, V(C1) = R(A1) = 8, lone y, z keep R = 0
    # delta: A [0 + 0.5*0 - 0, 8 - 0] = [0, 8]; B [0 - 4, 0] = [-4, 0]; C [0 + 0.5*8 - 0, 0 - 8] = [4, -8]
    adv = compute_advantages(three_paths(), "gagpo", value_proxy="loo_mean", **RAW)
    np.testing.assert_allclose(adv, [2, 8, -4, 0, 2, -8])
    # max_steps 2: B and C are truncated failures; C's last row bootstraps with V(x) = 4
    adv = compute_advantages(three_paths(), "gagpo", bootstrap_truncated=True, max_steps=2, **RAW)
    np.testing.assert_allclose(adv, [1, 4, -2, 0, 1.5, -2])


@pytest.mark.parametrize("seed", range(6))
def test_lambda_one_is_gigpo_mean_norm_step_term(seed):
    b = random_batch(np.random.default_rng(seed), anchors=8)     # enough states to leave some rows alone
    adv = compute_advantages(b, "gagpo", gae_lambda=1.0, norm_scope="none", value_proxy_penalised=True)
    step = compute_advantages(b, "gigpo", mode="mean_norm") - compute_advantages(b, "grpo", mode="mean_norm")
    groups = exact_anchor_groups(b)
    shared = np.bincount(groups)[groups] >= 2
    assert shared.any() and not shared.all()
    np.testing.assert_allclose(adv, step, atol=1e-9)      # singletons: R - pen - V(=R - pen) = 0 = GiGPO
    # with the default un-penalised values: GiGPO's step term on shared groups without an invalid action,
    # -pen on singletons (where GiGPO gives 0)
    adv = compute_advantages(b, "gagpo", gae_lambda=1.0, norm_scope="none")
    pen = 0.1 * ~b.action_valid
    clean = shared & (np.bincount(groups, weights=pen)[groups] == 0)
    assert clean.any()
    np.testing.assert_allclose(adv[clean], step[clean], atol=1e-9)
    np.testing.assert_allclose(adv[~shared], -pen[~shared], atol=1e-12)


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0])
def test_one_trajectory_per_group_without_revisits_gives_minus_penalty(lam):
    rng = np.random.default_rng(1)
    trajs = [(g, [(f"g{g} s{t}", float(rng.integers(0, 3))) for t in range(int(rng.integers(1, 6)))])
             for g in range(5)]
    b = make_batch(trajs, invalid=(0, 3))
    adv = compute_advantages(b, "gagpo", gae_lambda=lam, norm_scope="none")
    np.testing.assert_allclose(adv, -0.1 * ~b.action_valid, atol=1e-12)


def test_lambda_zero_is_one_step_td():
    adv = compute_advantages(three_paths(), "gagpo", gamma=0.5, gae_lambda=0.0, norm_scope="none")
    np.testing.assert_allclose(adv, [0, 4, -2, 0, 2, -4])


def test_all_fail_group_gives_exactly_zero_and_episode_weight_adds_grpo():
    fail = make_batch([(0, [("s", 0.0), ("x", 0.0)]), (0, [("s", 0.0)])])
    assert compute_advantages(fail, "gagpo").tolist() == [0.0, 0.0, 0.0]
    b = three_paths()
    both = compute_advantages(b, "gagpo", gamma=0.5, episode_weight=1.0)
    np.testing.assert_allclose(both, compute_advantages(b, "gagpo", gamma=0.5)
                               + compute_advantages(b, "grpo", gamma=0.5, mode="mean_norm"))


def test_scopes_and_revisits():
    b = three_paths()
    batch_scope = compute_advantages(b, "gagpo", gamma=0.5, gae_lambda=0.5, norm_scope="batch")
    np.testing.assert_allclose(batch_scope, [1, 4, -2, 0, 1, -4])       # one group: the batch is the group
    anchor = compute_advantages(b, "gagpo", gamma=0.5, gae_lambda=0.5, norm_scope="anchor_group")
    # groups s0 {1, -2}, x {4, -4} centred; lone y, z keep their value
    np.testing.assert_allclose(anchor, [1.5, 4, -1.5, 0, 1, -4])
    # a revisit joins its own earlier step's group but delta still follows time
    loop = make_batch([(0, [("n", 0.0), ("n", 0.0), ("w", 2.0)])])
    # gamma 1: R = [2, 2, 2], V(n) = 2, V(w) = 2 -> delta = [0 + 2 - 2, 0 + 2 - 2, 2 - 2] = 0
    assert compute_advantages(loop, "gagpo", gamma=1.0, norm_scope="none").tolist() == [0.0, 0.0, 0.0]


def test_missing_anchor_names_gagpo():
    b = StepBatch([0], [0], [0], [1.0], [True])
    with pytest.raises(ValueError, match="'gagpo' needs StepBatch.anchor"):
        compute_advantages(b, "gagpo")
