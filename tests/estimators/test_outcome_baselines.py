"""RLOO and REINFORCE++ (verl's semantics on step records): hand-computed examples."""
import numpy as np
import pytest

from estimators import compute_advantages

from .helpers import make_batch, random_batch


def rloo_batch(invalid=()):
    # group 0: A wins 10 in 2 steps, B fails in 1, C gets 5 in 3 steps; group 1: one trajectory D (3)
    return make_batch([(0, [("s", 0.0), ("a", 10.0)]), (0, [("s", 0.0)]),
                       (0, [("s", 0.0), ("c", 0.0), ("d", 5.0)]), (1, [("t", 3.0)])], invalid=invalid)


def test_rloo_leaves_the_whole_trajectory_out():
    adv = compute_advantages(rloo_batch(), "rloo")
    # A: 10 - mean(0, 5) = 7.5; B: 0 - mean(10, 5) = -7.5; C: 5 - mean(10, 0) = 0; D alone: raw score 3
    np.testing.assert_allclose(adv, [7.5, 7.5, -7.5, 0.0, 0.0, 0.0, 3.0])


def test_rloo_equals_verls_n_over_n_minus_1_rule_and_options():
    adv = compute_advantages(rloo_batch(), "rloo", mode="mean_std_norm")     # RLOO has no std normalisation
    episode = np.array([10.0, 0.0, 5.0])
    verl = 3 / 2 * (episode - episode.mean())                               # verl: n/(n-1) (s - mean)
    np.testing.assert_allclose(adv[[0, 2, 3]], verl)
    assert compute_advantages(rloo_batch(), "rloo", singleton_episode="zero")[-1] == 0.0


def test_rloo_penalty_hits_only_its_row():
    adv = compute_advantages(rloo_batch(invalid=(1,)), "rloo", invalid_penalty=0.1)
    np.testing.assert_allclose(adv[:2], [7.5, 7.4])
    np.testing.assert_allclose(adv[2:4], [-7.5, 0.0])       # the others' baseline is their episode return


def test_rloo_equal_returns_give_minus_the_penalty():
    b = make_batch([(0, [("s", 0.1), ("s", 0.2)]), (0, [("s", 0.3)]), (0, [("x", 0.3)])], invalid=(3,))
    np.testing.assert_allclose(compute_advantages(b, "rloo"), [0.0, 0.0, 0.0, -0.1], atol=1e-15)


def test_reinforce_pp_whitens_discounted_returns_over_the_batch():
    b = make_batch([(0, [("s", 0.0), ("a", 4.0)]), (1, [("t", 1.0)])])
    adv = compute_advantages(b, "reinforce_pp", gamma=0.5)
    # R = [2, 4, 1]: mean 7/3, unbiased var 7/3 (groups play no part)
    np.testing.assert_allclose(adv, np.array([-1 / 3, 5 / 3, -4 / 3]) / np.sqrt(7 / 3 + 1e-8))


def test_reinforce_pp_penalty_after_discounting_and_degenerate_batches():
    b = make_batch([(0, [("s", 0.0), ("a", 4.0)]), (1, [("t", 1.0)])], invalid=(0,))
    adv = compute_advantages(b, "reinforce_pp", gamma=0.5, invalid_penalty=1.0)
    R = np.array([1.0, 4.0, 1.0])                           # 2 - 1 on the invalid row only
    np.testing.assert_allclose(adv, (R - 2.0) / np.sqrt(3.0 + 1e-8))
    assert compute_advantages(make_batch([(0, [("s", 1.0)])]), "reinforce_pp").tolist() == [0.0]
    flat = make_batch([(0, [("s", 0.0), ("a", 10.0)]), (0, [("t", 10.0)])])      # R = 10 everywhere
    np.testing.assert_array_equal(compute_advantages(flat, "reinforce_pp", gamma=1.0), 0.0)


@pytest.mark.parametrize("seed", range(4))
def test_reinforce_pp_has_zero_mean_and_unit_std(seed):
    adv = compute_advantages(random_batch(np.random.default_rng(seed)), "reinforce_pp")
    assert abs(adv.mean()) < 1e-12 and adv.std(ddof=1) == pytest.approx(1.0, rel=1e-6)
