"""The control-variate truth of scripted batches (benchmarks/credit/strata.py): strata per (state, recorded
action), the recursion down an episode against a hand computation, and the conditioned first draw."""
from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.credit.mc_truth import ContinuationStore, Episode
from benchmarks.credit.scripted_policy import ScriptedPolicy
from benchmarks.credit.strata import chain, plan_strata, split_half_advantages, strata_truth


def two_episodes():
    """Two episodes of one goal sharing s_0 and its action, then parting; rows 0-1 and 2-4."""
    a = Episode("g", 7, ("x", "y"), ("h0", "h1"), (0, 1))
    b = Episode("g", 7, ("x", "z", "w"), ("h0", "h1", "h2"), (2, 3, 4))
    return [a, b]


def test_strata_are_distinct_states_and_actions_and_skip_certain_actions():
    plan = plan_strata(two_episodes(), [0.8, 0.5, 0.8, 0.25, 1.0])
    # s_0 with x (shared by both episodes), s_1 with y, s_1 with z; the last row's pi = 1 needs nothing
    assert plan.row_stratum.tolist() == [0, 1, 0, 2, -1]
    assert plan.exclude == ["x", "y", "z"]
    assert plan.row_next.tolist() == [1, -1, 3, 4, -1]
    assert plan.row_state.tolist() == [0, 1, 0, 1, 2]
    task, seed, replay, t, exclude = plan.job(2)
    assert (task, seed, replay.actions, t, exclude) == ("g", 7, ("x",), 1, "z")
    with pytest.raises(ValueError, match=r"probability in \(0, 1\]"):
        plan_strata(two_episodes(), [0.8, 0.0, 0.8, 0.25, 1.0])


def test_the_recursion_against_a_hand_computation(tmp_path):
    ep = [Episode("g", 1, ("a0", "a1"), ("h0", "h1"), (0, 1))]
    plan = plan_strata(ep, [0.8, 0.5])
    store = ContinuationStore(tmp_path / "s.jsonl")
    store.add([{"key": plan.keys[0], "disc": d, "won": d > 0, "invalid": False} for d in (2.0, 4.0)]
              + [{"key": plan.keys[1], "disc": d, "won": d > 0, "invalid": False} for d in (0.0, 6.0)])
    truth = strata_truth(plan, store, reward=[0.0, 10.0], gamma=0.9)
    # row 1: Q = 10, A = 0.5 (10 - 3), W = 0.5 * 10 + 0.5 * 3, var W = 0.25 * 18 / 2
    # row 0: Q = 0.9 * 6.5, A = 0.2 (5.85 - 3), var A = 0.04 (0.81 * 2.25 + 2 / 2)
    assert truth.q.tolist() == pytest.approx([5.85, 10.0])
    assert truth.adv.tolist() == pytest.approx([0.57, 3.5])
    assert truth.v.tolist() == pytest.approx([0.8 * 5.85 + 0.2 * 3, 6.5])
    # noise: the sample variances of the means (2 / 2 and 18 / 2), down the chain
    assert truth.noise_var.tolist() == pytest.approx([0.04 * (0.81 * 2.25 + 1.0), 0.25 * 9.0])
    # the SE shrinks each toward the pooled variance 10 with 4 prior degrees of freedom: (40 + s^2) / 5 / 2
    v0, v1 = (40 + 2) / 5 / 2, (40 + 18) / 5 / 2
    assert (truth.se ** 2).tolist() == pytest.approx([0.04 * (0.81 * 0.25 * v1 + v0), 0.25 * v1])
    assert truth.v_start.tolist() == pytest.approx(truth.v.tolist())


def test_the_estimate_is_unbiased_on_a_two_step_chain():
    """A 2-step world: from s_0 the recorded action (pi 0.7) leads to s_1, any other to a return of 1 or 0
    (win rate 0.4); from s_1 the recorded action (pi 0.6) wins 10, any other wins 10 with rate 0.5. The exact
    A of both rows against the mean of many small-K estimates."""
    rng = np.random.default_rng(0)
    gamma, k = 0.9, 4
    plan = plan_strata([Episode("g", 1, ("a", "b"), ("h0", "h1"), (0, 1))], [0.7, 0.6])
    w1 = 0.6 * 10 + 0.4 * 5
    exact = [0.3 * (gamma * w1 - 0.4), 0.4 * (10 - 5)]
    est = []
    for _ in range(3000):
        qbar = np.array([rng.binomial(1, 0.4, k).mean(), 10 * rng.binomial(1, 0.5, k).mean()])
        var = np.array([0.24, 25.0]) / k
        est.append(chain(plan, [0.0, 10.0], gamma, qbar, var)[2])
    est = np.array(est)
    assert np.abs(est.mean(axis=0) - exact).max() < 4 * est.std(axis=0).max() / math.sqrt(len(est))
    # the SE the recursion gives is the estimate's spread
    se = np.sqrt(chain(plan, [0.0, 10.0], gamma, np.zeros(2), np.array([0.24, 25.0]) / k)[3])
    assert est.std(axis=0) == pytest.approx(se, rel=0.06)


def test_split_halves_use_disjoint_continuations(tmp_path):
    ep = [Episode("g", 1, ("a0",), ("h0",), (0,))]
    plan = plan_strata(ep, [0.5])
    store = ContinuationStore(tmp_path / "s.jsonl")
    store.add([{"key": plan.keys[0], "disc": d, "won": d > 0, "invalid": False}
               for d in (0.0, 10.0, 0.0, 10.0, 0.0, 0.0)])
    a, b = split_half_advantages(plan, store, reward=[10.0], gamma=0.9)
    assert a.tolist() == pytest.approx([0.5 * 10.0])            # evens 0, 0, 0
    assert b.tolist() == pytest.approx([0.5 * (10.0 - 20 / 3)])  # odds 10, 10, 0


def test_a_conditioned_first_draw_avoids_the_recorded_action_in_proportion():
    info = {"admissible_actions": ["go north", "go south", "take key", "go north"]}
    rng = np.random.default_rng(0)
    picks = [ScriptedPolicy(0.4).choose(None, info, rng, "textcraft", lambda env: ["take key"], "here",
                                        exclude="take key").action for _ in range(3000)]
    assert "take key" not in picks
    share = np.mean([p == "go north" for p in picks])
    assert abs(share - 2 / 3) < 4 * math.sqrt(2 / 9 / len(picks))
    with pytest.raises(ValueError, match="probability 1"):
        ScriptedPolicy(0.0).choose(None, info, rng, "textcraft", lambda env: ["take key"], "here",
                                   exclude="take key")
