"""The edge cases of spec §10, one test (or more) each."""
import numpy as np
import pytest

from estimators import StepBatch, available_estimators, compute_advantages, step_returns, resolve_options

from .helpers import make_batch, one_hot_embedder


def two_state_batch(**kw):
    return make_batch([(0, [("a", 0.0), ("b", 10.0)]), (0, [("a", 0.0), ("c", 0.0)])],
                      embed=one_hot_embedder("abc"), keys=["k1", "k2", "k3", "k4"], **kw)


# §10.1 singletons ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gigpo", "bigpo", "pace", "bipace"])
def test_singleton_step_group_gives_zero_step_term(name):
    b = two_state_batch()
    episode = compute_advantages(b, "grpo", mode="mean_norm")
    adv = compute_advantages(b, name, mode="mean_norm", eps=0.0)
    # rows 1 (b) and 3 (c) are singletons: only the episode term remains
    np.testing.assert_allclose(adv[[1, 3]], episode[[1, 3]])
    assert not np.allclose(adv[[0, 2]], episode[[0, 2]])


@pytest.mark.parametrize("mode,expected", [("mean_norm", 7.0), ("mean_std_norm", 7.0 / (1 + 1e-6))])
def test_singleton_episode_pool_keeps_raw_score_or_zero(mode, expected):
    b = make_batch([(0, [("a", 7.0)]), (1, [("a", 0.0)]), (1, [("a", 1.0)])])
    adv = compute_advantages(b, "grpo", mode=mode)
    assert adv[0] == pytest.approx(expected, rel=1e-12)
    assert compute_advantages(b, "grpo", mode=mode, singleton_episode="zero")[0] == 0.0
    assert adv[1] < 0 < adv[2]


def test_hgpo_step_without_any_group_gets_zero():
    b = make_batch([(0, [("a", 10.0)]), (0, [("b", 0.0)])])
    np.testing.assert_array_equal(compute_advantages(b, "hgpo"), [0.0, 0.0])


# §10.2 all-equal returns -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["grpo", "gigpo", "hgpo", "pace"])
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_all_equal_returns_give_zero(name, mode):
    b = make_batch([(0, [("s", 0.1)]) for _ in range(7)])
    np.testing.assert_array_equal(compute_advantages(b, name, mode=mode), np.zeros(7))


def test_equal_guard_tolerance_on_float32_discounted_returns():
    # seven successful trajectories of equal length, rewards stored in float32: R = 10 * 0.95^k
    rewards = np.float32(10.0) * np.float32(0.95) ** np.arange(4, dtype=np.float32)
    trajs = [(0, [(f"s{k}", 0.0) for k in range(3)] + [("s3", 10.0)]) for _ in range(7)]
    b = make_batch(trajs)
    b32 = StepBatch(b.group_id, b.traj_id, b.step_idx, b.reward.astype(np.float32), b.action_valid,
                    anchor=b.anchor)
    R = step_returns(b32, resolve_options("gigpo"))
    np.testing.assert_allclose(R[:4], rewards[::-1], rtol=1e-6)
    for mode in ("mean_norm", "mean_std_norm"):
        np.testing.assert_array_equal(compute_advantages(b32, "gigpo", mode=mode), 0.0)


def test_equal_guard_can_be_disabled():
    b = make_batch([(0, [("s", 0.1)]) for _ in range(7)])
    adv = compute_advantages(b, "grpo", mode="mean_std_norm", equal_tol=None)
    assert np.all(np.abs(adv) < 1e-3)   # float64 residue only, no guard


# §10.3 near-equal returns under mean_std_norm ---------------------------------------------------
def test_penalty_difference_is_amplified_to_one_over_sqrt2():
    b = make_batch([(0, [("s", 0.0)]), (0, [("s", 0.0)])], invalid=[1])
    step = (compute_advantages(b, "gigpo", mode="mean_std_norm")
            - compute_advantages(b, "grpo", mode="mean_std_norm"))
    np.testing.assert_allclose(step, [1 / np.sqrt(2), -1 / np.sqrt(2)], rtol=1e-4)


# §10.4 length-weighted episode statistics --------------------------------------------------------
def test_cross_step_pool_is_length_weighted():
    b = make_batch([(0, [("a", 10.0)]), (0, [("b", 0.0)] * 9)])
    np.testing.assert_allclose(compute_advantages(b, "grpo", mode="mean_norm"), [9.0] + [-1.0] * 9)
    np.testing.assert_allclose(compute_advantages(b, "grpo", mode="mean_norm", cross_steps=False),
                               [5.0] + [-5.0] * 9)


# §10.5 invalid actions ---------------------------------------------------------------------------
def test_penalty_is_post_discount_and_not_propagated():
    b = make_batch([(0, [("a", 0.0), ("b", 0.0), ("c", 10.0)])], invalid=[1])
    R = step_returns(b, resolve_options("gigpo", gamma=0.5))
    np.testing.assert_allclose(R, [2.5, 5.0 - 0.1, 10.0])   # row 0 keeps 0.5^2 * 10, no -0.05
    # GRPO scores of one trajectory differ by the penalty across steps: s = [10, 9.9, 10], and the
    # cross-step pool holds all three rows
    s = np.array([10.0, 9.9, 10.0])
    np.testing.assert_allclose(compute_advantages(b, "grpo", mode="mean_norm"), s - s.mean())


# §10.6 truncated episodes ------------------------------------------------------------------------
def test_truncated_episode_has_no_bootstrap():
    b = make_batch([(0, [("a", 0.0)] * 50)], invalid=[49])
    R = step_returns(b, resolve_options("gigpo"))
    np.testing.assert_allclose(R[:49], 0.0)
    assert R[49] == pytest.approx(-0.1)


# §10.7 eps = 0 / eps >= 2 ------------------------------------------------------------------------
def test_eps_two_gives_one_cluster_per_group():
    from estimators import bigpo_clusters
    rng = np.random.default_rng(0)
    b = make_batch([(g, [(f"s{i}", 0.0) for i in range(4)]) for g in (0, 0, 1, 1)],
                   embed=lambda a: rng.standard_normal(5))
    clusters = bigpo_clusters(b, eps=2.0)
    assert len(set(clusters[b.group_id == 0])) == 1 and len(set(clusters[b.group_id == 1])) == 1
    assert set(clusters[b.group_id == 0]).isdisjoint(clusters[b.group_id == 1])


# §10.8 scope: clusters never cross groups ---------------------------------------------------------
@pytest.mark.parametrize("name", ["gigpo", "bigpo", "pace", "bipace", "hgpo"])
def test_groups_never_cross_rollout_groups(name):
    one = make_batch([(0, [("s", 10.0)]), (0, [("s", 0.0)])], embed=lambda a: np.ones(3))
    two = make_batch([(0, [("s", 10.0)]), (0, [("s", 0.0)]), (1, [("s", 10.0)]), (1, [("s", 10.0)])],
                     embed=lambda a: np.ones(3))
    np.testing.assert_allclose(compute_advantages(two, name)[:2], compute_advantages(one, name))


def test_similarity_mode_is_first_fit_to_fixed_representative():
    from estimators import similarity_anchor_groups
    # 'abcdef' founds; 'abcdeX' (ratio 0.83) joins it; 'abcdXX' is 0.67 to the founder (never the
    # running members), so with thresh 0.8 it starts a new cluster even though it is 0.83 to 'abcdeX'.
    b = make_batch([(0, [("abcdef", 0.0), ("abcdeX", 0.0), ("abcdXX", 0.0)])])
    labels = similarity_anchor_groups(b, 0.8)
    assert labels[0] == labels[1] != labels[2]


# §10.9 padding duplicates -------------------------------------------------------------------------
def test_padding_copies_must_not_enter():
    b = make_batch([(0, [("s", 1.0)]), (0, [("s", 0.0)])])
    with pytest.raises(ValueError, match="duplicate"):
        StepBatch(np.r_[b.group_id, 0], np.r_[b.traj_id, 0], np.r_[b.step_idx, 0], np.r_[b.reward, 1.0],
                  np.r_[b.action_valid, True])


# §10.10 same-trajectory revisits share a group ----------------------------------------------------
def test_revisit_in_same_trajectory_shares_group():
    b = make_batch([(0, [("nothing happens.", 0.0), ("x", 0.0), ("nothing happens.", 10.0)])])
    adv = compute_advantages(b, "gigpo", gamma=1.0, mode="mean_norm")
    # R = [10, 10, 10] -> group {0, 2} all equal -> 0; the episode pool is three equal rows -> 0
    np.testing.assert_allclose(adv, [0.0, 0.0, 0.0])
    b2 = make_batch([(0, [("nothing happens.", 0.0), ("x", 10.0), ("nothing happens.", 0.0)])])
    adv2 = compute_advantages(b2, "gigpo", gamma=1.0, mode="mean_norm")
    np.testing.assert_allclose(adv2, [5.0, 0.0, -5.0])       # R = [10, 10, 0]: group {0, 2} -> +-5


# §10.14 gamma edge values -------------------------------------------------------------------------
def test_gamma_zero_and_one():
    b = make_batch([(0, [("a", 1.0), ("b", 2.0), ("c", 3.0)])])
    np.testing.assert_allclose(step_returns(b, resolve_options("gigpo", gamma=0.0)), [1, 2, 3])
    np.testing.assert_allclose(step_returns(b, resolve_options("gigpo", gamma=1.0)), [6, 5, 3])


@pytest.mark.parametrize("name", available_estimators())
def test_rows_in_any_order_with_gaps_in_step_idx(name):
    b = make_batch([(0, [("a", 0.0), ("b", 10.0)]), (0, [("a", 0.0), ("c", 0.0)])],
                   embed=one_hot_embedder("abc"))
    gapped = b.with_fields(step_idx=b.step_idx * 3)
    np.testing.assert_allclose(compute_advantages(gapped, name), compute_advantages(b, name))
