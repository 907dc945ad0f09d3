"""GraphHCA: hindsight credit from success probabilities on the induced transition graph (spec-2 section 2).

Built from the published description (an abstract) and HCA's Bayes identity, not released code (none
exists); every [ASSUMPTION] of the spec is an option of `EstimatorOptions` with its stated default.

Per episode group, nodes are the anchors (optionally with the previous `hca_history` anchors), plus an
absorbing SUCC (p = 1) and FAIL (p = 0). Edges follow each trajectory in step order, and its last row
goes to SUCC or FAIL. With visit-count transition probabilities P, the discounted success probability
p = hca_gamma * (P p + P_SUCC) has a unique solution for hca_gamma < 1 on any graph, cycles included.
Under deterministic transitions the hindsight ratio h/pi is p(s_{t+1}) / p(s_t), so the step signal is
the log-potential difference a^H = log max(p(next), p_min) - log max(p(state), p_min), and
A = A^E + hca_weight * a^H (GRPO exactly at weight 0).
"""
from __future__ import annotations

import numpy as np

from . import grouping
from .batch import StepBatch, missing_field_error
from .registry import STEP_PARTITIONS, EstimatorOptions, episode_term, register
from .returns import group_normalize, next_row, trajectory_outcome


def graph_nodes(batch: StepBatch, history: int, estimator: str = "graphhca") -> np.ndarray:
    """Dense node code per row: (group, anchor_t, anchor_{t-1}, ..., anchor_{t-history}); steps before
    the start of the trajectory are a code of their own, so early steps have shorter keys."""
    if history < 0:
        raise ValueError(f"hca_history must be >= 0; got {history}")
    if history == 0:
        return grouping.exact_anchor_groups(batch, estimator)
    anchor = batch.anchor
    if anchor is None:
        raise missing_field_error(estimator, "anchor")
    view = batch.view
    length = np.bincount(view.traj, minlength=view.n_trajs)
    grid = np.full((view.n_trajs, int(length.max())), -1, dtype=np.int64)
    grid[view.traj, view.pos] = batch.field_codes("anchor")
    cols = [view.group]
    for back in range(history + 1):
        before = view.pos - back
        cols.append(np.where(before >= 0, grid[view.traj, np.maximum(before, 0)], -1))
    return grouping.dense_codes(*cols)


STEP_PARTITIONS["graphhca"] = lambda b, o: graph_nodes(b, o.hca_history)


def success_probabilities(batch: StepBatch, o: EstimatorOptions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: p(state), p(successor) (1 for SUCC, 0 for FAIL, NaN for a dropped edge), and the node code.

    One batched dense solve of (I - gamma P) p = gamma P_SUCC over all groups, each padded to the
    largest group's node count (padding rows are identity rows with right-hand side 0).
    """
    if not 0.0 <= o.hca_gamma < 1.0:
        raise ValueError(f"hca_gamma must be in [0, 1); got {o.hca_gamma} (at 1 a closed cycle has no unique "
                         "success probability)")
    if o.hca_truncation == "drop_edge" and o.max_steps is None:
        raise ValueError("graphhca: hca_truncation='drop_edge' needs max_steps (the episode cap) to tell a "
                         "truncated trajectory from a failed one")
    view = batch.view
    nodes = graph_nodes(batch, o.hca_history)
    n_nodes = int(nodes.max()) + 1
    node_group = np.zeros(n_nodes, dtype=np.int64)
    node_group[nodes] = view.group
    # nodes are dense over (group, ...) so each group's nodes are one contiguous range
    starts = np.searchsorted(node_group, np.arange(view.n_groups))
    local = np.arange(n_nodes) - starts[node_group]
    m = int(np.bincount(node_group, minlength=view.n_groups).max())
    G = view.n_groups
    success, truncated = trajectory_outcome(batch, o.success_threshold, o.max_steps)
    nxt = next_row(batch)
    inner = nxt >= 0
    to_succ = ~inner & success
    dropped = ~inner & truncated & (o.hca_truncation == "drop_edge")
    src = nodes
    out_count = np.bincount(src[~dropped], minlength=n_nodes).astype(np.float64)
    edge_src, edge_dst = src[inner], nodes[nxt[inner]]
    flat = (node_group[edge_src] * m + local[edge_src]) * m + local[edge_dst]
    counts = np.bincount(flat, minlength=G * m * m).reshape(G, m, m)
    succ = np.bincount(src[to_succ], minlength=n_nodes).astype(np.float64)
    inv_out = np.divide(1.0, out_count, out=np.zeros(n_nodes), where=out_count > 0)
    scale = np.zeros((G, m))
    scale[node_group, local] = inv_out
    rhs = np.zeros((G, m))
    rhs[node_group, local] = o.hca_gamma * succ * inv_out
    system = np.eye(m)[None] - o.hca_gamma * counts * scale[:, :, None]
    p_node = np.linalg.solve(system, rhs[:, :, None])[:, :, 0][node_group, local]
    p_node = np.clip(p_node, 0.0, 1.0)          # solver round-off only: the fixed point lies in [0, 1]
    p_row = p_node[nodes]
    p_next = np.where(inner, p_node[nodes[np.maximum(nxt, 0)]], np.where(to_succ, 1.0, 0.0))
    return p_row, np.where(dropped, np.nan, p_next), nodes


def hindsight_signal(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """a^H = log p~(successor) - log p~(state), p~ = max(p, p_min); 0 on a dropped last edge."""
    if not 0.0 < o.p_min <= 1.0:
        raise ValueError(f"p_min must be in (0, 1]; got {o.p_min}")
    p_row, p_next, _ = success_probabilities(batch, o)
    dropped = np.isnan(p_next)
    log_next = np.log(np.maximum(np.where(dropped, p_row, p_next), o.p_min))
    return log_next - np.log(np.maximum(p_row, o.p_min))


COMBINE = {
    "additive": lambda episode, signal, w: episode + w * signal,
    "multiplicative": lambda episode, signal, w: episode * np.exp(w * signal),   # A^E * rho^w
}


@register("graphhca", needs=("anchor",), default_mode="mean_std_norm")
def graphhca(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """GraphHCA: A^E + hca_weight * (log p(next) - log p(state)), p the discounted success probability on
    the group's anchor graph (spec-2 section 2). The penalty enters only through A^E."""
    signal = hindsight_signal(batch, o)
    if o.hca_step_norm:
        signal = group_normalize(signal, batch.view.group, mode="mean_std_norm", epsilon=o.epsilon, ddof=1,
                                 equal_tol=o.equal_tol, singleton="zero")
    return COMBINE[o.hca_combine](episode_term(batch, o), signal, o.hca_weight)
