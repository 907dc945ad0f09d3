"""Gated-BEPO (spec-3 section 3): hand example, solver = value iteration, the reductions of 3.5 and the
edge cases of 3.6."""
import math

import numpy as np
import pytest

from benchmarks.speed.estimator_speed import batch_to_rows, loop_advantages
from estimators import compute_advantages, exact_anchor_groups, resolve_options
from estimators.bepo import gae_advantages, gate_weights, node_values

from .helpers import make_batch, random_batch

HAND = dict(bepo_gamma=0.5, gae_lambda=0.5, bepo_norm="none")


def branch_with_self_loop(invalid=()):
    # A: s -> s (self-loop) -> x -> wins 10; B: s -> y -> fails. Nodes s, x, y, END_succ, END_fail.
    return make_batch([(0, [("s", 0.0), ("s", 0.0), ("x", 10.0)]), (0, [("s", 0.0), ("y", 0.0)])],
                      invalid=invalid)


def test_hand_example():
    # V(x) = 10, V(y) = 0, V(s) = (0.5 V(s) + 0.5 * 10 + 0.5 * 0) / 3 -> V(s) = 2
    b = branch_with_self_loop()
    v, v_succ, _, _ = node_values(b, resolve_options("gated_bepo", **HAND))
    np.testing.assert_allclose(v, [2, 2, 10, 2, 0])
    np.testing.assert_allclose(v_succ, [2, 10, 0, 0, 0])
    # delta = [-1, 3, 0, -2, 0]; GAE at gamma * lambda = 0.25
    np.testing.assert_allclose(gae_advantages(b, resolve_options("gated_bepo", **HAND)),
                               [-0.25, 3, 0, -2, 0])
    # k(s) = 3 successors (s, x, y): beta = 2/3; x and y have one successor: closed gate, A = A^E
    episode = np.array([4.0, 4, 4, -6, -6])                     # mean_norm over 5 rows, mean 6
    expected = episode.copy()
    expected[[0, 1, 3]] = episode[[0, 1, 3]] / 3 + 2 / 3 * np.array([-0.25, 3, -2])
    np.testing.assert_allclose(compute_advantages(b, "gated_bepo", **HAND), expected)


@pytest.mark.parametrize("seed", range(6))
def test_solver_equals_value_iteration_with_cycles(seed):
    b = random_batch(np.random.default_rng(seed), anchors=3, max_len=8)   # revisits, cycles, self-loops
    rows = batch_to_rows(b)
    ref = loop_advantages(rows, "gated_bepo")
    np.testing.assert_allclose(compute_advantages(b, "gated_bepo"), ref, atol=1e-8)


@pytest.mark.parametrize("combine", ["convex", "additive"])
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_closed_gate_is_grpo(combine, mode):
    b = random_batch(np.random.default_rng(2))
    np.testing.assert_allclose(compute_advantages(b, "gated_bepo", bepo_min_successors=math.inf,
                                                  bepo_combine=combine, mode=mode),
                               compute_advantages(b, "grpo", mode=mode))


@pytest.mark.parametrize("seed", range(4))
def test_zero_sum_per_node_at_lambda_zero(seed):
    b = random_batch(np.random.default_rng(seed), anchors=3)
    o = resolve_options("gated_bepo", gae_lambda=0.0)
    shaped = gae_advantages(b, o) + 0.1 * ~b.action_valid
    nodes = exact_anchor_groups(b)
    np.testing.assert_allclose(np.bincount(nodes, weights=shaped), 0.0, atol=1e-10)


def tree_batch(rng, rollouts=6, depth=4):
    """Each anchor is the whole path so far: every node has one predecessor (a forest)."""
    trajs = []
    for _ in range(rollouts):
        path, steps = "r", []
        length = int(rng.integers(1, depth + 1))
        for t in range(length):
            steps.append((path, 10.0 if (t == length - 1 and rng.random() < 0.5) else 0.0))
            path += str(int(rng.integers(2)))
        trajs.append((0, steps))
    return make_batch(trajs)


@pytest.mark.parametrize("seed", range(6))
def test_forest_graph_reduces_to_gigpo_mean_norm(seed):
    b = tree_batch(np.random.default_rng(seed))
    adv = compute_advantages(b, "gated_bepo", gae_lambda=1.0, bepo_min_successors=1, bepo_mix="fixed",
                             bepo_beta=1.0, bepo_norm="none", bepo_combine="additive", mode="mean_norm")
    np.testing.assert_allclose(adv, compute_advantages(b, "gigpo", mode="mean_norm"), atol=1e-9)


def test_all_fail_and_deterministic_success_path():
    fail = make_batch([(0, [("s", 0.0), ("x", 0.0)]), (0, [("s", 0.0), ("y", 0.0)])])
    np.testing.assert_allclose(compute_advantages(fail, "gated_bepo"), 0.0)
    path = make_batch([(0, [("s", 0.0), ("x", 10.0)])] * 2)
    np.testing.assert_allclose(gae_advantages(path, resolve_options("gated_bepo")), 0.0, atol=1e-12)


def test_singleton_node_gets_the_episode_term_where_gagpo_does_not():
    b = make_batch([(0, [("s", 0.0), ("x", 8.0)]), (0, [("s", 0.0), ("y", 0.0)]),
                    (0, [("z", 0.0), ("x", 0.0)])])
    adv = compute_advantages(b, "gated_bepo")
    episode = compute_advantages(b, "grpo", mode="mean_norm")
    assert adv[4] == pytest.approx(episode[4])                 # z: one successor, closed gate
    assert compute_advantages(b, "gagpo", gae_lambda=0.5)[4] != pytest.approx(episode[4])


def test_gate_bounds_and_truncation():
    b = random_batch(np.random.default_rng(5), anchors=3)
    o = resolve_options("gated_bepo")
    _, _, nodes, succ = node_values(b, o)
    w = gate_weights(nodes, succ, o)
    assert np.all(w >= 0) and np.all(w < 1)
    cut = compute_advantages(b, "gated_bepo", max_steps=6, bootstrap_truncated=True)
    assert np.all(np.isfinite(cut))


def test_gamma_one_needs_an_acyclic_graph_and_bad_options():
    with pytest.raises(ValueError, match="bepo_gamma = 1 needs acyclic"):
        compute_advantages(branch_with_self_loop(), "gated_bepo", bepo_gamma=1.0)
    acyclic = make_batch([(0, [("s", 0.0), ("x", 10.0)]), (0, [("s", 0.0), ("y", 0.0)])])
    assert np.all(np.isfinite(compute_advantages(acyclic, "gated_bepo", bepo_gamma=1.0)))
    for opts, msg in [(dict(bepo_gamma=1.5), "bepo_gamma"),
                      (dict(bepo_min_successors=0), "bepo_min_successors"),
                      (dict(bepo_beta=2.0), "bepo_beta"),
                      (dict(bepo_norm="batch"), "unknown bepo_norm"),
                      (dict(bootstrap_truncated=True), "needs max_steps")]:
        with pytest.raises(ValueError, match=msg):
            compute_advantages(acyclic, "gated_bepo", **opts)
