"""The one-group-per-goal controls and the step term within a given partition (estimators/coarse.py)."""
import numpy as np
import pytest

from estimators import compute_advantages, exact_anchor_groups
from estimators.coarse import goal_groups, within_partition

from .helpers import random_batch


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_a_radius_beyond_every_distance_makes_bigpo_and_bipace_the_goal_controls(seed, mode):
    # cosine distance is at most 2, so eps 2 puts each goal's rows into one cluster
    batch = random_batch(np.random.default_rng(seed))
    np.testing.assert_allclose(compute_advantages(batch, "bigpo", eps=2.0, mode=mode),
                               compute_advantages(batch, "gigpo_goal", mode=mode))
    np.testing.assert_allclose(compute_advantages(batch, "bipace", eps=2.0, mode=mode),
                               compute_advantages(batch, "pace_goal", mode=mode))


@pytest.mark.parametrize("seed", range(4))
def test_within_the_anchor_partition_the_formulas_are_gigpo_and_pace(seed):
    batch = random_batch(np.random.default_rng(seed))
    anchors = exact_anchor_groups(batch)
    np.testing.assert_allclose(within_partition(batch, anchors, "gigpo", mode="mean_norm"),
                               compute_advantages(batch, "gigpo", mode="mean_norm"))
    np.testing.assert_allclose(within_partition(batch, anchors, "pace", mode="mean_norm"),
                               compute_advantages(batch, "pace", mode="mean_norm"))


def test_goal_controls_differ_from_the_anchor_estimators():
    batch = random_batch(np.random.default_rng(0), anchors=6)
    assert len(np.unique(goal_groups(batch))) < len(np.unique(exact_anchor_groups(batch)))
    assert not np.allclose(compute_advantages(batch, "pace_goal"), compute_advantages(batch, "pace"))


def test_a_partition_across_goals_or_of_the_wrong_shape_is_refused():
    batch = random_batch(np.random.default_rng(1))
    with pytest.raises(ValueError, match="cross rollout groups"):
        within_partition(batch, np.zeros(len(batch), dtype=int), "gigpo")
    with pytest.raises(ValueError, match="one int code"):
        within_partition(batch, np.zeros(len(batch) + 1, dtype=int), "gigpo")
    with pytest.raises(ValueError, match="unknown formula"):
        within_partition(batch, goal_groups(batch), "bigpo")
