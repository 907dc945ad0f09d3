"""Identities between estimators (issue #2) and PACE invariants (spec §10.12)."""
import numpy as np
import pytest

from estimators import (available_estimators, bigpo_clusters, compute_advantages, exact_anchor_groups,
                        resolve_options, step_returns)
from estimators.registry import pace_step_term

from .helpers import one_hot_embedder, permuted, random_batch

SEEDS = range(5)


def with_one_hot(batch):
    """Replace the embeddings with the identity embedder of each row's anchor."""
    from estimators import StepBatch
    embed = one_hot_embedder(batch.anchor.tolist())
    return StepBatch(batch.group_id, batch.traj_id, batch.step_idx, batch.reward, batch.action_valid,
                     anchor=batch.anchor, action_key=batch.action_key,
                     embedding=np.stack([embed(a) for a in batch.anchor]))


def same_partition(a, b):
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_gigpo_with_zero_step_weight_is_grpo(seed, mode):
    b = random_batch(np.random.default_rng(seed))
    np.testing.assert_array_equal(compute_advantages(b, "gigpo", mode=mode, step_weight=0.0),
                                  compute_advantages(b, "grpo", mode=mode))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_bigpo_eps0_with_identity_embedder_is_gigpo(seed, mode):
    b = with_one_hot(random_batch(np.random.default_rng(seed)))
    assert same_partition(bigpo_clusters(b, eps=0.0), exact_anchor_groups(b))
    np.testing.assert_array_equal(compute_advantages(b, "bigpo", mode=mode, eps=0.0),
                                  compute_advantages(b, "gigpo", mode=mode))
    np.testing.assert_array_equal(compute_advantages(b, "bipace", mode=mode, eps=0.0),
                                  compute_advantages(b, "pace", mode=mode))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", available_estimators())
def test_row_permutation_changes_nothing(seed, name):
    rng = np.random.default_rng(seed)
    b = random_batch(rng)
    perm = rng.permutation(len(b))
    np.testing.assert_allclose(compute_advantages(permuted(b, perm), name), compute_advantages(b, name)[perm],
                               rtol=1e-12, atol=1e-12)


def pace_terms(b, variant="q_style"):
    o = resolve_options("pace", pace=variant)
    groups = exact_anchor_groups(b)
    return groups, step_returns(b, o), pace_step_term(step_returns(b, o), groups, b.action_key, o)


@pytest.mark.parametrize("seed", SEEDS)
def test_pace_q_style_is_zero_sum_per_cluster(seed):
    groups, _, term = pace_terms(random_batch(np.random.default_rng(seed)))
    sums = np.bincount(groups, weights=term)
    np.testing.assert_allclose(sums, 0.0, atol=1e-9)
    assert np.any(term != 0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("variant", ["q_style", "diff_peer"])
def test_pace_single_action_key_gives_zero(seed, variant):
    from estimators import StepBatch
    b = random_batch(np.random.default_rng(seed))
    one_key = StepBatch(b.group_id, b.traj_id, b.step_idx, b.reward, b.action_valid, anchor=b.anchor,
                        action_key=np.array(["same"] * len(b), dtype=object))
    _, _, term = pace_terms(one_key, variant)
    np.testing.assert_array_equal(term, 0.0)
    np.testing.assert_array_equal(compute_advantages(one_key, "pace", mode="mean_norm", pace=variant),
                                  compute_advantages(one_key, "grpo", mode="mean_norm"))


@pytest.mark.parametrize("seed", SEEDS)
def test_pace_all_distinct_keys_equals_gigpo_mean_norm(seed):
    from estimators import StepBatch
    b = random_batch(np.random.default_rng(seed))
    distinct = StepBatch(b.group_id, b.traj_id, b.step_idx, b.reward, b.action_valid, anchor=b.anchor,
                         action_key=np.array([f"k{i}" for i in range(len(b))], dtype=object))
    np.testing.assert_allclose(compute_advantages(distinct, "pace", mode="mean_norm"),
                               compute_advantages(distinct, "gigpo", mode="mean_norm"), atol=1e-12)


def test_pace_two_keys_is_q_minus_v():
    from estimators import StepBatch
    rng = np.random.default_rng(7)
    R = rng.normal(size=6)
    keys = np.array(["a", "b", "a", "b", "b", "a"], dtype=object)
    b = StepBatch(np.zeros(6, int), np.arange(6), np.zeros(6, int), R, np.ones(6, bool),
                  anchor=np.array(["s"] * 6, dtype=object), action_key=keys)
    _, _, term = pace_terms(b)
    for k in ("a", "b"):
        np.testing.assert_allclose(term[keys == k], R[keys == k].mean() - R.mean())


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", ["gigpo", "hgpo", "bigpo", "pace", "bipace"])
def test_step_groups_singletons_get_only_the_episode_term(seed, name):
    from estimators import step_groups
    b = random_batch(np.random.default_rng(seed), anchors=10)   # enough states to leave some rows alone
    codes = step_groups(b, name, mode="mean_norm")
    alone = np.bincount(codes)[codes] == 1
    assert alone.any() and not alone.all()
    adv = compute_advantages(b, name, mode="mean_norm")
    episode = compute_advantages(b, "grpo", mode="mean_norm")
    expected = 0.0 if name == "hgpo" else episode[alone]          # HGPO has no episode term by default
    np.testing.assert_allclose(adv[alone], expected, atol=1e-12)
    assert step_groups(b, "grpo") is None
