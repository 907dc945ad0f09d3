"""Gated-BEPO (arXiv 2608.06861): a mean-backup Bellman fixed point on each group's empirical rollout
graph, GAE over its TD residuals, gated to states with several observed successors (spec-3 section 3).

Only the components are sourced (abstract and paper notes); every formula is an [ASSUMPTION] of the spec
and an option of `EstimatorOptions` with its stated default.

    nodes  = anchors per group (graph.graph_nodes, bepo_history) + END_succ, END_fail, END_trunc (V = 0)
    V(u)   = mean over u's departures of (r_i + gamma_B V(succ(i)))        one batched dense solve
    delta  = r_i + gamma_B V(succ(i)) - V(n_i);  A_hat = GAE(delta, gamma_B lambda) - pen
    A~     = norm(A_hat within the episode group)                           (bepo_norm)
    g_i    = [k(n_i) >= k_min], k = distinct successors;  beta = 1 - 1/k    (bepo_min_successors, bepo_mix)
    A      = (1 - g beta) A^E + g beta A~                                   (bepo_combine)
"""
from __future__ import annotations

import numpy as np

from . import grouping
from .batch import StepBatch
from .graph import graph_nodes
from .registry import STEP_PARTITIONS, EstimatorOptions, episode_term, register
from .returns import backward_discount, group_normalize, next_row, penalty, trajectory_outcome

STEP_PARTITIONS["gated_bepo"] = lambda b, o: graph_nodes(b, o.bepo_history, "gated_bepo")
END_SUCC, END_FAIL, END_TRUNC = -1, -2, -3


def _has_cycle(counts: np.ndarray) -> np.ndarray:
    """(G,) True where a group's node graph (G, m, m edge counts) has a cycle: transitive closure by
    repeated squaring, then a reachable diagonal."""
    reach = counts > 0
    for _ in range(int(np.ceil(np.log2(max(counts.shape[1], 2)))) + 1):
        reach = reach | (np.matmul(reach.astype(np.float32), reach.astype(np.float32)) > 0)
    return np.diagonal(reach, axis1=1, axis2=2).any(axis=1)


def successors(batch: StepBatch, o: EstimatorOptions):
    """Per row: node n_i, successor node (or an END code < 0) and whether that END is a bootstrapped
    truncation (its successor value is then V(n_i))."""
    nodes = STEP_PARTITIONS["gated_bepo"](batch, o)
    nxt = next_row(batch)
    inner = nxt >= 0
    success, truncated = trajectory_outcome(batch, o.success_threshold, o.max_steps)
    end = np.where(success, END_SUCC, np.where(truncated, END_TRUNC, END_FAIL))
    succ = np.where(inner, nodes[np.maximum(nxt, 0)], end)
    boot = ~inner & truncated & o.bootstrap_truncated
    return nodes, succ, boot


def node_values(batch: StepBatch, o: EstimatorOptions):
    """(V per row's node, V per row's successor, nodes, successors): the mean-backup fixed point
    (I - gamma_B P) V = r_bar per group, one batched dense solve (GraphHCA's layout)."""
    if not 0.0 <= o.bepo_gamma <= 1.0:
        raise ValueError(f"bepo_gamma must be in [0, 1]; got {o.bepo_gamma}")
    if o.bootstrap_truncated and o.max_steps is None:
        raise ValueError("gated_bepo: bootstrap_truncated=True needs max_steps (the episode cap) to tell a "
                         "truncated trajectory from a finished one")
    view = batch.view
    nodes, succ, boot = successors(batch, o)
    n_nodes = int(nodes.max()) + 1
    node_group = np.zeros(n_nodes, dtype=np.int64)
    node_group[nodes] = view.group
    starts = np.searchsorted(node_group, np.arange(view.n_groups))   # each group's nodes are contiguous
    local = np.arange(n_nodes) - starts[node_group]
    m = int(np.bincount(node_group, minlength=view.n_groups).max())
    G = view.n_groups
    dst = np.where(boot, nodes, succ)            # a bootstrapped truncation backs up its own node's value
    edge = dst >= 0
    flat = (node_group[nodes[edge]] * m + local[nodes[edge]]) * m + local[dst[edge]]
    counts = np.bincount(flat, minlength=G * m * m).reshape(G, m, m).astype(np.float64)
    if o.bepo_gamma == 1.0:
        cyclic = _has_cycle(counts)
        if cyclic.any():
            raise ValueError(f"bepo_gamma = 1 needs acyclic group graphs, but {int(cyclic.sum())} group(s) "
                             "have a cycle or self-loop (no unique fixed point); use bepo_gamma < 1")
    visits = np.bincount(nodes, minlength=n_nodes).astype(np.float64)
    r_bar = np.bincount(nodes, weights=batch.reward, minlength=n_nodes) / visits
    inv = np.zeros((G, m))
    inv[node_group, local] = 1.0 / visits
    rhs = np.zeros((G, m))
    rhs[node_group, local] = r_bar
    system = np.eye(m)[None] - o.bepo_gamma * counts * inv[:, :, None]
    v_node = np.linalg.solve(system, rhs[:, :, None])[:, :, 0][node_group, local]
    v_succ = np.where(dst >= 0, v_node[np.maximum(dst, 0)], 0.0)
    return v_node[nodes], v_succ, nodes, succ


def gate_weights(nodes: np.ndarray, succ: np.ndarray, o: EstimatorOptions) -> np.ndarray:
    """g_i * beta_i per row: k(u) = distinct successors of u (each END kind counts as one)."""
    if not o.bepo_min_successors >= 1:
        raise ValueError(f"bepo_min_successors must be >= 1; got {o.bepo_min_successors}")
    if not 0.0 <= o.bepo_beta <= 1.0:
        raise ValueError(f"bepo_beta must be in [0, 1]; got {o.bepo_beta}")
    edge = grouping.dense_codes(nodes, succ)                # one code per distinct (node, successor)
    edge_node = np.empty(int(edge.max()) + 1, dtype=np.int64)
    edge_node[edge] = nodes
    k = np.bincount(edge_node, minlength=int(nodes.max()) + 1)[nodes].astype(np.float64)
    beta = 1.0 - 1.0 / k if o.bepo_mix == "adaptive" else np.full(len(nodes), o.bepo_beta)
    return np.where(k >= o.bepo_min_successors, beta, 0.0)


def gae_advantages(batch: StepBatch, o: EstimatorOptions, values=None) -> np.ndarray:
    """A_hat per row: GAE(delta, gamma_B * lambda) minus the row's penalty (after the recursion).
    ``values``: `node_values`' result when the caller has it already."""
    if not 0.0 <= o.gae_lambda <= 1.0:
        raise ValueError(f"gae_lambda must be in [0, 1]; got {o.gae_lambda}")
    v, v_succ, _, _ = node_values(batch, o) if values is None else values
    delta = batch.reward + o.bepo_gamma * v_succ - v
    return backward_discount(batch, delta, o.bepo_gamma * o.gae_lambda) - penalty(batch, o.invalid_penalty)


@register("gated_bepo", needs=("anchor",))
def gated_bepo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """Gated-BEPO: episode credit mixed with normalised GAE-of-fixed-point credit on nodes with several
    observed successors (spec-3 section 3). bepo_min_successors=inf is GRPO."""
    values = node_values(batch, o)
    weight = gate_weights(values[2], values[3], o)
    episode = episode_term(batch, o)
    if not weight.any():
        return episode
    adv = gae_advantages(batch, o, values)
    if o.bepo_norm != "none":
        pool = weight > 0 if o.bepo_norm == "gated_rows" else None
        adv = group_normalize(adv, batch.view.group, mode=o.mode, epsilon=o.epsilon, ddof=1,
                              equal_tol=o.equal_tol, pool=pool, singleton="zero")
    step = np.where(weight > 0, weight * adv, 0.0)       # rows outside a gated pool never reach the sum
    if o.bepo_combine == "convex":
        return (1.0 - weight) * episode + step
    return episode + step
