"""Small examples worked out by hand, one or more per estimator."""
import numpy as np
import pytest

from estimators import StepBatch, compute_advantages

from .helpers import make_batch


def test_grpo_mean_std_norm_by_hand():
    # A: rewards 0, 10 (score 10 on both rows); B: one step, score 0. Pool [10, 10, 0]:
    # mean 20/3, unbiased std 10/sqrt(3) -> A: 1/sqrt(3), B: -2/sqrt(3).
    b = make_batch([(0, [("s0", 0.0), ("s1", 10.0)]), (0, [("s0", 0.0)])])
    adv = compute_advantages(b, "grpo")
    np.testing.assert_allclose(adv, [1 / np.sqrt(3), 1 / np.sqrt(3), -2 / np.sqrt(3)], rtol=1e-5)
    np.testing.assert_allclose(compute_advantages(b, "grpo", mode="mean_norm"), [10 / 3, 10 / 3, -20 / 3])


def test_gigpo_by_hand():
    # gamma 0.5: R_A = [5, 10], R_B = [0]. Step groups: s0 {5, 0} -> +-2.5; s1 singleton -> 0.
    b = make_batch([(0, [("s0", 0.0), ("s1", 10.0)]), (0, [("s0", 0.0)])])
    adv = compute_advantages(b, "gigpo", gamma=0.5, mode="mean_norm")
    np.testing.assert_allclose(adv, [10 / 3 + 2.5, 10 / 3, -20 / 3 - 2.5])
    half = compute_advantages(b, "gigpo", gamma=0.5, mode="mean_norm", step_weight=0.5)
    np.testing.assert_allclose(half, [10 / 3 + 1.25, 10 / 3, -20 / 3 - 1.25])


def test_hgpo_by_hand():
    # gamma 1, history_length 1 (levels 1, 2), alpha 1, mean_norm.
    # A: s0,s1 R=[10,10]; B: s0,s1 R=[0,0]; C: s1,s1 R=[0,0].
    # level 1: s0 {A0,B0} -> +-5; s1 {A1,B1,C0,C1} mean 2.5 -> 7.5, -2.5, -2.5, -2.5
    # level 2: (s0,s1) {A1,B1} -> +-5; (s1,s1) {C1} singleton -> dropped
    # A1 = (2*7.5 + 3*5)/5 = 6; B1 = (2*-2.5 + 3*-5)/5 = -4; C0 = C1 = -2.5; A0 = 5; B0 = -5
    b = make_batch([(0, [("s0", 0.0), ("s1", 10.0)]), (0, [("s0", 0.0), ("s1", 0.0)]),
                    (0, [("s1", 0.0), ("s1", 0.0)])])
    adv = compute_advantages(b, "hgpo", gamma=1.0, mode="mean_norm", history_length=1)
    np.testing.assert_allclose(adv, [5, 6, -5, -4, -2.5, -2.5])
    # alpha = 0: equal weights -> A1 = (7.5 + 5)/2
    adv0 = compute_advantages(b, "hgpo", gamma=1.0, mode="mean_norm", history_length=1,
                              length_weight_alpha=0.0)
    np.testing.assert_allclose(adv0[1], 6.25)


def test_hgpo_uses_population_std_and_base_group():
    b = make_batch([(0, [("s0", 10.0)]), (0, [("s0", 0.0)])])
    adv = compute_advantages(b, "hgpo", gamma=1.0, mode="mean_std_norm", history_length=0)
    np.testing.assert_allclose(adv, [1.0, -1.0], rtol=1e-5)          # (10-5)/(5+eps), population std
    gigpo_step = compute_advantages(b, "gigpo", mode="mean_std_norm", step_weight=1.0) - \
        compute_advantages(b, "grpo", mode="mean_std_norm")
    np.testing.assert_allclose(gigpo_step, [1 / np.sqrt(2), -1 / np.sqrt(2)], rtol=1e-5)  # unbiased
    # base_group adds A^E (here +-1/sqrt(2)) at weight 1 next to level 1 at weight 2
    based = compute_advantages(b, "hgpo", gamma=1.0, mode="mean_std_norm", history_length=0, base_group=True)
    np.testing.assert_allclose(based, [(1 / np.sqrt(2) + 2 * 1.0) / 3, -(1 / np.sqrt(2) + 2 * 1.0) / 3],
                               rtol=1e-5)


def test_bigpo_merges_differently_worded_states_by_hand():
    # Anchors all differ (GiGPO: all singletons). Embeddings: A0=(1,0), A1=(0,1), B0 ~ A0 (cos 0.99).
    vecs = {"a0": [1.0, 0.0], "a1": [0.0, 1.0], "b0": [0.99, np.sqrt(1 - 0.99 ** 2)]}
    b = make_batch([(0, [("a0", 0.0), ("a1", 10.0)]), (0, [("b0", 0.0)])], embed=lambda a: np.array(vecs[a]))
    adv = compute_advantages(b, "bigpo", gamma=0.5, mode="mean_norm", eps=0.05)
    np.testing.assert_allclose(adv, [10 / 3 + 2.5, 10 / 3, -20 / 3 - 2.5], rtol=1e-6)
    gig = compute_advantages(b, "gigpo", gamma=0.5, mode="mean_norm")
    np.testing.assert_allclose(gig, [10 / 3, 10 / 3, -20 / 3])
    # eps below the distance 0.01 keeps them apart
    np.testing.assert_allclose(compute_advantages(b, "bigpo", gamma=0.5, mode="mean_norm", eps=0.005), gig)


@pytest.mark.parametrize("variant,expected_step", [("q_style", [0, 0, -3, 3]), ("diff_peer", [1, -1, -4, 4])])
def test_pace_by_hand(variant, expected_step):
    # One state, four one-step trajectories, keys x x y z, returns 4 2 0 6 (V = 3).
    # q_style: Q_x = 3, Q_y = 0, Q_z = 6. diff_peer: x vs {0, 6}; y vs {4, 2, 6}; z vs {4, 2, 0}.
    b = make_batch([(0, [("s", r)]) for r in (4.0, 2.0, 0.0, 6.0)], keys=["x", "x", "y", "z"])
    episode = np.array([1.0, -1.0, -3.0, 3.0])
    for name, kw in (("pace", {}), ("bipace", {"eps": 1e-6})):
        b2 = StepBatch(b.group_id, b.traj_id, b.step_idx, b.reward, b.action_valid, anchor=b.anchor,
                       action_key=b.action_key, embedding=np.ones((4, 2)))
        adv = compute_advantages(b2, name, mode="mean_norm", pace=variant, **kw)
        np.testing.assert_allclose(adv, episode + np.array(expected_step, dtype=float))


def test_pace_std_norm_divides_by_cluster_std():
    b = make_batch([(0, [("s", r)]) for r in (4.0, 2.0, 0.0, 6.0)], keys=["x", "x", "y", "z"])
    plain = compute_advantages(b, "pace", mode="mean_norm", step_weight=1.0)
    normed = compute_advantages(b, "pace", mode="mean_norm", pace_std_norm=True)
    std = np.std([4.0, 2.0, 0.0, 6.0], ddof=1)
    episode = np.array([1.0, -1.0, -3.0, 3.0])
    np.testing.assert_allclose(normed - episode, (plain - episode) / (std + 1e-6))
