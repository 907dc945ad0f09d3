"""GACA (spec-2 section 3): hand example, alpha's range and fallbacks, the GRPO / GiGPO reductions."""
import numpy as np
import pytest

from estimators import StepBatch, compute_advantages, exact_anchor_groups, resolve_options
from estimators.gaca import mixing_weights

from .helpers import make_batch, random_batch


def two_paths(nll=(1.0, 3.0, 2.0, 2.0, 2.0), resp_len=None, invalid=()):
    # A: s -> x -> g wins 10 (g is seen once); B: s -> x fails
    return make_batch([(0, [("s", 0.0), ("x", 0.0), ("g", 10.0)]), (0, [("s", 0.0), ("x", 0.0)])],
                      nll=nll, resp_len=resp_len, invalid=invalid)


def alpha(batch, **opts):
    o = resolve_options("gaca", **opts)
    return mixing_weights(batch, o, exact_anchor_groups(batch))


def test_hand_example():
    b = two_paths()
    # A's NLL [1, 3, 2]: mean 2, population std sqrt(2/3) -> z = [-sqrt(1.5), sqrt(1.5), 0]; g is alone
    # -> alpha 0; B's NLL is flat -> 0.5
    z = np.sqrt(1.5) * 2 / 2 * (np.sqrt(2 / 3) / (np.sqrt(2 / 3) + 1e-6))
    expected_alpha = [1 / (1 + np.exp(z)), 1 / (1 + np.exp(-z)), 0.0, 0.5, 0.5]
    np.testing.assert_allclose(alpha(b), expected_alpha)
    # gamma 1: R = [10, 10, 10, 0, 0]; A^E (mean_norm, 5 rows, mean 6) = [4, 4, 4, -6, -6];
    # A^S = [5, 5, 0, -5, -5]
    episode, step = np.array([4.0, 4, 4, -6, -6]), np.array([5.0, 5, 0, -5, -5])
    a = np.array(expected_alpha)
    np.testing.assert_allclose(compute_advantages(b, "gaca", gamma=1.0), (1 - a) * episode + a * step)
    np.testing.assert_allclose(compute_advantages(b, "gaca", gamma=1.0, step_weight=2.0),
                               (1 - a) * episode + 2 * a * step)


def test_other_criticality_normalisations_and_invert():
    b = two_paths()
    # minmax: (nll - 1) / (3 - 1 + eps); mean_ratio: clip(nll / 2, 0, 2) / 2; flat B -> 0.5 in both
    np.testing.assert_allclose(alpha(b, crit_norm="minmax"), [0.0, 2 / (2 + 1e-6), 0.0, 0.5, 0.5])
    np.testing.assert_allclose(alpha(b, crit_norm="mean_ratio"), [0.25, 0.75, 0.0, 0.5, 0.5])
    np.testing.assert_allclose(alpha(b, crit_norm="minmax", crit_invert=True),
                               [1.0, 1e-6 / (2 + 1e-6), 0, 0.5, 0.5])
    np.testing.assert_allclose(alpha(b, crit_norm="zscore_sigmoid", crit_kappa=0.0),
                               [0.5, 0.5, 0.0, 0.5, 0.5])
    np.testing.assert_allclose(alpha(b, singleton_alpha="keep", crit_norm="minmax")[2], 0.5 / (1 + 5e-7))


def test_fallbacks_empty_response_invalid_rows_and_one_step():
    b = two_paths(resp_len=[2, 0, 2, 2, 2])               # A1 is empty: alpha 0, out of A's statistics
    # A's pool is A0 (NLL 1) and g (NLL 2, alone in its anchor group but scored): z(A0) = -0.5 / (0.5 + eps)
    np.testing.assert_allclose(alpha(b)[:2], [1 / (1 + np.exp(0.5 / (0.5 + 1e-6))), 0.0])
    b = two_paths(nll=(1.0, 3.0, 2.0, 2.0, 9.0), invalid=(4,))
    a = alpha(b)
    assert a[4] == 0.0 and a[3] == 0.5                    # invalid B1 neither counts nor gets weight
    assert alpha(b, exclude_invalid_from_norm=False)[4] == pytest.approx(1 / (1 + np.exp(-1 / (1 + 1e-6))))
    one = make_batch([(0, [("s", 0.0)]), (0, [("s", 10.0)])], nll=[5.0, 0.1])
    np.testing.assert_allclose(alpha(one), [0.5, 0.5])


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_alpha_zero_is_grpo(seed, mode):
    b = random_batch(np.random.default_rng(seed))
    np.testing.assert_array_equal(compute_advantages(b, "gaca", crit_norm="const0", mode=mode),
                                  compute_advantages(b, "grpo", mode=mode))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_flat_nll_with_additive_weighted_is_gigpo(seed, mode):
    rng = np.random.default_rng(seed)
    b = random_batch(rng, p_invalid=0.0)
    b = b.with_fields(resp_len=np.full(len(b), 3), old_logp_sum=np.full(len(b), -1.5))   # NLL 0.5 everywhere
    np.testing.assert_allclose(compute_advantages(b, "gaca", gaca_combine="additive_weighted", mode=mode),
                               compute_advantages(b, "gigpo", mode=mode), atol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_alpha_is_a_weight(seed):
    b = random_batch(np.random.default_rng(seed))
    for norm in ("zscore_sigmoid", "minmax", "mean_ratio"):
        a = alpha(b, crit_norm=norm)
        assert np.all((a >= 0) & (a <= 1))
        assert np.all(a[b.resp_len == 0] == 0)


def test_missing_scores_name_gaca():
    b = StepBatch([0], [0], [0], [1.0], [True], anchor=["s"])
    with pytest.raises(ValueError, match="'gaca' needs StepBatch.resp_len"):
        compute_advantages(b, "gaca")
