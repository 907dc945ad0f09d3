"""GraphHCA (spec-2 section 2): hand example, solver = value iteration, cycles, telescoping, reductions."""
import numpy as np
import pytest

from benchmarks.speed.reference_loops import success_probabilities_by_iteration
from benchmarks.speed.estimator_speed import batch_to_rows
from estimators import StepBatch, compute_advantages, resolve_options
from estimators.graph import hindsight_signal, success_probabilities

from .helpers import make_batch, random_batch


def fork():
    # A: s -> a -> wins 10; B: s -> b -> fails
    return make_batch([(0, [("s", 0.0), ("a", 10.0)]), (0, [("s", 0.0), ("b", 0.0)])])


def test_hand_example():
    # gamma_g 0.5: p(a) = 0.5 * 1, p(b) = 0.5 * 0 -> floor 1e-3, p(s) = 0.5 * (p(a) + p(b)) / 2 = 0.125
    o = resolve_options("graphhca", hca_gamma=0.5)
    p_row, p_next, _ = success_probabilities(fork(), o)
    np.testing.assert_allclose(p_row, [0.125, 0.5, 0.125, 0.0])
    np.testing.assert_allclose(p_next, [0.5, 1.0, 0.0, 0.0])
    signal = [np.log(4.0), np.log(2.0), np.log(1e-3 / 0.125), 0.0]
    np.testing.assert_allclose(hindsight_signal(fork(), o), signal)
    adv = compute_advantages(fork(), "graphhca", hca_gamma=0.5, mode="mean_norm")
    np.testing.assert_allclose(adv, np.array([5.0, 5.0, -5.0, -5.0]) + 0.5 * np.array(signal))
    mult = compute_advantages(fork(), "graphhca", hca_gamma=0.5, mode="mean_norm",
                              hca_combine="multiplicative")
    np.testing.assert_allclose(mult, np.array([5.0, 5.0, -5.0, -5.0]) * np.exp(0.5 * np.array(signal)))


@pytest.mark.parametrize("seed", range(6))
def test_solver_equals_value_iteration_with_cycles(seed):
    b = random_batch(np.random.default_rng(seed), anchors=3, max_len=8)   # few states: revisits and cycles
    rows = batch_to_rows(b)
    trajs = {}
    for i in np.argsort(b.step_idx, kind="stable"):
        trajs.setdefault((rows[i]["group"], rows[i]["traj"]), []).append(int(i))
    p_iter, _ = success_probabilities_by_iteration(rows, trajs, 0.9)
    p_row, _, _ = success_probabilities(b, resolve_options("graphhca", hca_gamma=0.9))
    expected = [p_iter[(r["group"], r["anchor"])] for r in rows]
    np.testing.assert_allclose(p_row, expected, atol=1e-8)


def test_self_loop_step_gets_zero_and_cycle_converges():
    b = make_batch([(0, [("s", 0.0), ("s", 0.0), ("t", 0.0), ("s", 0.0), ("g", 10.0)]), (0, [("s", 0.0)])])
    o = resolve_options("graphhca", hca_gamma=0.9)
    signal = hindsight_signal(b, o)
    assert signal[0] == 0.0                                  # s -> s
    # s has out-edges s, t, g, FAIL (1 each); t -> s; g -> SUCC: p(g) = 0.9, p(t) = 0.9 p(s),
    # p(s) = 0.9/4 (p(s) + p(t) + p(g)) -> p(s) = 0.2025 / (1 - 0.225 - 0.2025)
    p_s = 0.2025 / (1 - 0.225 - 0.2025)
    p_row, _, _ = success_probabilities(b, o)
    np.testing.assert_allclose(p_row[[0, 2, 4]], [p_s, 0.9 * p_s, 0.9])


@pytest.mark.parametrize("seed", range(4))
def test_telescoping_per_trajectory(seed):
    b = random_batch(np.random.default_rng(seed), anchors=4)
    o = resolve_options("graphhca")
    signal = hindsight_signal(b, o)
    p_row, _, _ = success_probabilities(b, o)
    view = b.view
    won = np.bincount(view.traj, weights=b.reward) > 0
    for t in range(view.n_trajs):
        rows = np.flatnonzero(view.traj == t)
        first = rows[np.argmin(b.step_idx[rows])]
        terminal = 1.0 if won[t] else o.p_min
        assert signal[rows].sum() == pytest.approx(np.log(terminal) - np.log(max(p_row[first], o.p_min)))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("combine", ["additive", "multiplicative"])
def test_weight_zero_is_grpo(seed, mode, combine):
    b = random_batch(np.random.default_rng(seed))
    adv = compute_advantages(b, "graphhca", hca_weight=0.0, mode=mode, hca_combine=combine)
    np.testing.assert_array_equal(adv, compute_advantages(b, "grpo", mode=mode))


def test_all_fail_group_is_zero_and_success_paths_favour_shortcuts():
    fail = make_batch([(0, [("s", 0.0), ("x", 0.0)]), (0, [("s", 0.0), ("y", 0.0)])])
    assert compute_advantages(fail, "graphhca").tolist() == [0.0] * 4
    short_long = make_batch([(0, [("s", 0.0), ("g", 10.0)]), (0, [("s", 0.0), ("m", 0.0), ("g", 10.0)])])
    p_row, _, _ = success_probabilities(short_long, resolve_options("graphhca"))
    assert p_row[1] > p_row[3]                                # g (1 step to SUCC) > m (2 steps)
    assert np.all(np.isfinite(compute_advantages(short_long, "graphhca")))


def test_truncation_options_and_history_nodes():
    b = make_batch([(0, [("s", 0.0), ("x", 0.0)]), (0, [("s", 0.0), ("g", 10.0)])])
    o = resolve_options("graphhca", hca_gamma=0.5, hca_truncation="drop_edge", max_steps=2)
    p_row, p_next, _ = success_probabilities(b, o)
    # x has no out-edge -> p = 0; s: out-edges to x and g -> p = 0.5 * (0 + 0.5) / 2
    np.testing.assert_allclose(p_row, [0.125, 0.0, 0.125, 0.5])
    assert np.isnan(p_next[1]) and hindsight_signal(b, o)[1] == 0.0
    # history 1: x after s and x after t are different nodes
    h = make_batch([(0, [("s", 0.0), ("x", 10.0)]), (0, [("t", 0.0), ("x", 0.0)])])
    _, _, nodes0 = success_probabilities(h, resolve_options("graphhca"))
    _, _, nodes1 = success_probabilities(h, resolve_options("graphhca", hca_history=1))
    assert nodes0[1] == nodes0[3] and nodes1[1] != nodes1[3]


def test_step_norm_standardises_the_signal_per_group():
    b = random_batch(np.random.default_rng(2))
    plain = compute_advantages(b, "graphhca", hca_weight=0.0)
    normed = compute_advantages(b, "graphhca", hca_step_norm=True, hca_weight=1.0) - plain
    for g in np.unique(b.group_id):
        part = normed[b.group_id == g]
        assert abs(part.mean()) < 1e-9 and part.std(ddof=1) == pytest.approx(1.0, rel=1e-4)


def test_missing_anchor_names_graphhca():
    with pytest.raises(ValueError, match="'graphhca' needs StepBatch.anchor"):
        compute_advantages(StepBatch([0], [0], [0], [1.0], [True]), "graphhca")
