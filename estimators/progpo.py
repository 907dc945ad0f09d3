"""ProGPO (arXiv 2607.04242): exact-prefix peers plus transition credit from rollout-based state
potentials, fused across history depths by inverse variance (spec-3 section 2).

Only the components are sourced (abstract and literature maps); no formula or number is. Every form below
is an [ASSUMPTION] of the spec and an option of `EstimatorOptions` with its stated default.

    P(i)     = (group, o_0, a_0, ..., a_{t-1}, o_t)          exact-prefix peer group   (progpo_prefix)
    A^peer   = norm(R, P), 0 on singletons                   GiGPO's step term over P
    Phi_l(i) = mean R0 over the row's level-l group, v_l = (s^2_l + sigma0^2) / n_l, levels sem, 0..D
    Phi(i)   = sum_l Phi_l / v_l / sum_l 1 / v_l                inverse-variance fusion   (progpo_depths, ...)
    c_i      = r_i + gamma Phi(next) - Phi(i) - pen_i          transition credit (Phi = 0 after the end)
    A        = A^E + omega * (A^peer if |P| >= 2 else eta * c)  (progpo_transition_scope, progpo_eta)
"""
from __future__ import annotations

import logging

import numpy as np

from . import grouping
from .batch import StepBatch, missing_field_error
from .registry import STEP_PARTITIONS, EstimatorOptions, episode_term, register, step_returns
from .returns import discounted_returns, group_normalize, group_std, next_state_values, penalty

log = logging.getLogger(__name__)
START = -1          # the code of a step before the start of the trajectory


def _grids(batch: StepBatch, estimator: str):
    """(trajectory, position) grids of anchor and action codes (START outside the trajectory), built once
    per batch (the prefix key and every potential level read them)."""
    for name in ("anchor", "action_key"):
        if getattr(batch, name) is None:
            raise missing_field_error(estimator, name)
    if "progpo_grids" not in batch._field_codes:
        view = batch.view
        width = int(np.bincount(view.traj, minlength=view.n_trajs).max())
        obs = np.full((view.n_trajs, width), START, dtype=np.int64)
        act = np.full((view.n_trajs, width), START, dtype=np.int64)
        obs[view.traj, view.pos] = batch.field_codes("anchor")
        act[view.traj, view.pos] = batch.field_codes("action_key")
        batch._field_codes["progpo_grids"] = (obs, act)
    return batch._field_codes["progpo_grids"]


def history_keys(batch: StepBatch, depth, estimator: str = "progpo") -> np.ndarray:
    """Dense code of (group, (o_{t-d}, a_{t-d}), ..., (o_{t-1}, a_{t-1}), o_t) per row; steps before the
    trajectory's start are a START marker. depth 'full' = the whole prefix; depth 0 = GiGPO's (group,
    anchor)."""
    view = batch.view
    obs, act = _grids(batch, estimator)
    if depth == "full":
        # trajectories sorted by (group, o_0, a_0, o_1, ...): equal prefixes up to o_t are contiguous, and a
        # prefix group starts wherever a trajectory differs from the previous one in a column up to o_t
        traj_group = np.zeros(view.n_trajs, dtype=np.int64)
        traj_group[view.traj] = view.group
        cols = np.empty((view.n_trajs, 1 + 2 * obs.shape[1]), dtype=np.int64)
        cols[:, 0], cols[:, 1::2], cols[:, 2::2] = traj_group, obs, act
        order = np.lexsort(cols.T[::-1])
        ranked = cols[order]
        same = np.zeros(cols.shape, dtype=bool)
        same[1:] = ranked[1:] == ranked[:-1]
        run = np.cumsum(~np.logical_and.accumulate(same, axis=1), axis=0)[:, 1::2]   # at each o_t column
        code = np.empty_like(run)
        code[order] = run
        return grouping.dense_codes(view.pos, code[view.traj, view.pos])
    depth = int(depth)
    if depth < 0:
        raise ValueError(f"progpo history depth must be >= 0 or 'full'; got {depth}")
    cols = [view.group, obs[view.traj, view.pos]]
    for back in range(1, depth + 1):
        before = view.pos - back
        inside = before >= 0
        at = np.maximum(before, 0)
        cols.append(np.where(inside, obs[view.traj, at], START))
        cols.append(np.where(inside, act[view.traj, at], START))
    return grouping.dense_codes(*cols)


def _prefix(o: EstimatorOptions):
    p = o.progpo_prefix
    if p == "full":
        return p
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 0:
        raise ValueError(f"progpo_prefix must be 'full' or an int >= 0; got {p!r}")
    return int(p)


STEP_PARTITIONS["progpo"] = lambda b, o: history_keys(b, _prefix(o))


def semantic_level(batch: StepBatch, o: EstimatorOptions):
    """The semantic cluster of o_t per row, or None when the level is off (or unavailable under 'auto')."""
    mode = o.progpo_semantic
    if mode == "auto":
        text = batch.anchor is not None and all(isinstance(a, str) for a in batch.anchor)
        mode = "embedding" if batch.embedding is not None else "text" if text else "off"
        if mode == "off":
            log.info("progpo: no embeddings and non-text anchors, so no semantic potential level")
    if mode == "off":
        return None
    if mode == "embedding":
        if batch.embedding is None:
            raise missing_field_error("progpo (progpo_semantic='embedding')", "embedding")
        return grouping.bigpo_clusters(batch, o.eps, "progpo")
    if not 0.0 < o.progpo_sem_thresh < 1.0:
        raise ValueError(f"progpo_sem_thresh must be in (0, 1); got {o.progpo_sem_thresh}")
    return grouping.similarity_anchor_groups(batch, o.progpo_sem_thresh, "progpo")


def _level_stats(values: np.ndarray, codes: np.ndarray, loo: bool):
    """Per row: count, mean and ddof-1 variance of `values` in the row's group (without the row if loo)."""
    n = np.bincount(codes).astype(np.float64)
    mean = np.bincount(codes, weights=values) / n
    m2 = np.bincount(codes, weights=(values - mean[codes]) ** 2)
    n, mean, m2 = n[codes], mean[codes], m2[codes]
    if loo:
        n_out = n - 1
        mean_out = np.divide(mean * n - values, n_out, out=np.zeros_like(mean), where=n_out > 0)
        m2 = np.maximum(m2 - (values - mean) * (values - mean_out), 0.0)     # Welford removal
        n, mean = n_out, mean_out
    var = np.divide(m2, n - 1, out=np.zeros_like(m2), where=n > 1)
    return n, mean, var


def potentials(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """Phi per row: inverse-variance fusion of the level means of R0 (spec-3 2.3 steps 3-5)."""
    if o.progpo_depths < 0:
        raise ValueError(f"progpo_depths must be >= 0; got {o.progpo_depths}")
    ret = discounted_returns(batch, o.gamma)        # un-penalised: a format error is no state property
    view = batch.view
    scale = np.zeros(view.n_groups)
    np.maximum.at(scale, view.group, np.abs(ret))
    prior = np.maximum(0.25 * scale ** 2, 1e-8)[view.group]
    # finest first, so a level whose members equal a finer kept level's is the one dropped
    levels = [history_keys(batch, d) for d in range(o.progpo_depths, -1, -1)]
    sem = semantic_level(batch, o)
    if sem is not None:
        levels.append(sem)
    counts = [np.bincount(c)[c] for c in levels]
    num = np.zeros(len(batch))
    den = np.zeros(len(batch))
    for k, codes in enumerate(levels):
        dup = np.zeros(len(batch), dtype=bool)
        for j in range(k):      # same member set iff the intersection is as large as both cells
            joint = grouping.dense_codes(levels[j], codes)
            both = np.bincount(joint)[joint]
            dup |= (both == counts[k]) & (both == counts[j])
        n, mean, var = _level_stats(ret, codes, o.potential_loo)
        use = ~dup & (n > 0)
        w = np.where(use, 1.0 / ((var + prior) / np.maximum(n, 1)), 0.0)
        num += w * mean
        den += w
    # only a leave-one-out row alone at every level has no estimate: it gets no potential (0)
    return np.divide(num, den, out=np.zeros(len(batch)), where=den > 0)


def transition_credit(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """c_i = r_i + gamma Phi(next) - Phi(i) - pen_i, Phi = 0 after the last row (or Phi(i) on a truncated
    last row with bootstrap_truncated); scaled by 1 / (std_g(R) + epsilon) in mean_std_norm ('match_mode')."""
    if o.bootstrap_truncated and o.max_steps is None:
        raise ValueError("progpo: bootstrap_truncated=True needs max_steps (the episode cap) to tell a "
                         "truncated trajectory from a finished one")
    phi = potentials(batch, o)
    c = batch.reward + o.gamma * next_state_values(batch, phi, o) - phi - penalty(batch, o.invalid_penalty)
    if o.progpo_transition_norm == "match_mode" and o.mode == "mean_std_norm":
        c = c / (group_std(step_returns(batch, o), batch.view.group) + o.epsilon)
    return c


def singleton_share(batch: StepBatch, **options) -> float:
    """Share of rows alone in their prefix group (no peer signal; the paper's 33.7% / 44.5% motivation)."""
    from .registry import resolve_options
    groups = STEP_PARTITIONS["progpo"](batch, resolve_options("progpo", **options))
    return float(np.mean(np.bincount(groups)[groups] == 1)) if len(batch) else 0.0


@register("progpo", needs=("anchor", "action_key"))
def progpo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """ProGPO: A^E + omega * (exact-prefix peer term, or eta * potential-difference credit on singletons)
    (spec-3 section 2). progpo_prefix=0 with eta=0 is GiGPO; omega=0 is GRPO."""
    prefix = STEP_PARTITIONS["progpo"](batch, o)
    peer = group_normalize(step_returns(batch, o), prefix, mode=o.mode, epsilon=o.epsilon, ddof=1,
                           equal_tol=o.equal_tol, singleton="zero")
    if o.progpo_eta == 0:
        step = peer
    else:
        c = o.progpo_eta * transition_credit(batch, o)
        if o.progpo_transition_scope == "all":
            step = peer + c
        else:
            step = np.where(np.bincount(prefix)[prefix] >= 2, peer, c)
    return episode_term(batch, o) + o.step_weight * step
