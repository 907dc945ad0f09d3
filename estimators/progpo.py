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
        order = _lexicographic_order(cols)
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
    return history_levels(batch, depth, estimator)[0]


def history_levels(batch: StepBatch, depth: int, estimator: str = "progpo") -> list[np.ndarray]:
    """[level depth, ..., level 1, level 0]: ``history_keys(batch, d)``'s groups for every d <= depth, finest
    first (dense codes; numbered in another order than ``history_keys``, the same partitions)."""
    view = batch.view
    obs, act = _grids(batch, estimator)
    # grids with `depth` START columns in front, so a step `back` before a row is one flat offset away
    width = obs.shape[1] + depth
    grids = []
    for grid in (obs, act):
        padded = np.full((view.n_trajs, width), START, dtype=np.int64)
        padded[:, depth:] = grid
        grids.append(padded.ravel())
    at = view.traj * width + view.pos + depth
    # every level is a prefix of the columns (group, o_t, a_{t-1}, o_{t-1}, ...): packed into one mixed-radix
    # key, level d is the key divided by the radix of the columns after its own, and one sort of the deepest
    # key orders every level's cells contiguously (a sort per level costs several times more). Codes run
    # from START (-1) to below the field's number of distinct values.
    n_obs, n_act = int(grids[0].max()) + 2, int(grids[1].max()) + 2
    if view.n_groups * n_obs * (n_obs * n_act) ** depth >= 2 ** 62:      # does not fit: a sort per level
        cols = [view.group, grids[0][at]]
        for back in range(1, depth + 1):
            cols += [grids[1][at - back], grids[0][at - back]]
        return [grouping.dense_codes(*cols[:2 + 2 * d]) for d in range(depth, -1, -1)]
    key = view.group * n_obs + grids[0][at] + 1
    for back in range(1, depth + 1):
        key = (key * n_act + grids[1][at - back] + 1) * n_obs + grids[0][at - back] + 1
    order = np.argsort(key)
    ranked = key[order]
    levels = []
    for d in range(depth, -1, -1):
        cell = ranked // (n_obs * n_act) ** (depth - d)
        run = np.zeros(len(cell), dtype=np.int64)
        np.cumsum(cell[1:] != cell[:-1], out=run[1:])
        code = np.empty_like(run)
        code[order] = run
        levels.append(code)
    return levels


def _lexicographic_order(cols: np.ndarray) -> np.ndarray:
    """The row order that sorts an int64 matrix lexicographically: one argsort of each row's big-endian
    bytes (sign bit flipped, so byte order is numeric order), where np.lexsort makes one pass per column
    (~100 columns for a 50-step trajectory: 10x slower)."""
    flipped = (np.ascontiguousarray(cols).view(np.uint64) ^ np.uint64(1 << 63)).astype(">u8")
    return np.argsort(flipped.view(f"S{8 * cols.shape[1]}").ravel(), kind="stable")


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


def _level_stats(values: np.ndarray, codes: np.ndarray, loo: bool, count: np.ndarray | None = None):
    """Per row: count, mean and ddof-1 variance of `values` in the row's group (without the row if loo).
    ``count``: ``np.bincount(codes)`` when the caller has it."""
    n = (np.bincount(codes) if count is None else count).astype(np.float64)
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


def potentials(batch: StepBatch, o: EstimatorOptions, ret: np.ndarray | None = None) -> np.ndarray:
    """Phi per row: inverse-variance fusion of the level means of R0 (spec-3 2.3 steps 3-5). ``ret``: R0
    (``discounted_returns``) when the caller has it."""
    if o.progpo_depths < 0:
        raise ValueError(f"progpo_depths must be >= 0; got {o.progpo_depths}")
    if ret is None:
        ret = discounted_returns(batch, o.gamma)        # un-penalised: a format error is no state property
    view = batch.view
    scale = np.zeros(view.n_groups)
    np.maximum.at(scale, view.group, np.abs(ret))
    prior = np.maximum(0.25 * scale ** 2, 1e-8)[view.group]
    # finest first, so a level whose members equal a finer kept level's is the one dropped
    levels = history_levels(batch, o.progpo_depths)
    cell_counts = [np.bincount(c) for c in levels]
    counts = [n[c] for n, c in zip(cell_counts, levels)]
    # the history levels are nested (level d refines level d-1), so a row's cell at a coarser level holds
    # its cell at the finer one, and the two are the same set iff they have as many members
    dups = [np.zeros(len(batch), dtype=bool)] + [counts[k] == counts[k - 1] for k in range(1, len(levels))]
    sem = semantic_level(batch, o)
    if sem is not None:     # not nested in the others (two rows of one anchor may embed apart)
        levels.append(sem)
        cell_counts.append(np.bincount(sem))
        counts.append(cell_counts[-1][sem])
        dup = np.zeros(len(batch), dtype=bool)
        for j in range(len(levels) - 1):   # same member set iff the intersection is as large as both cells
            joint = grouping.dense_codes(levels[j], sem)
            both = np.bincount(joint)[joint]
            dup |= (both == counts[-1]) & (both == counts[j])
        dups.append(dup)
    num = np.zeros(len(batch))
    den = np.zeros(len(batch))
    for codes, dup, cells in zip(levels, dups, cell_counts):
        n, mean, var = _level_stats(ret, codes, o.potential_loo, cells)
        use = ~dup & (n > 0)
        w = np.where(use, 1.0 / ((var + prior) / np.maximum(n, 1)), 0.0)
        num += w * mean
        den += w
    # only a leave-one-out row alone at every level has no estimate: it gets no potential (0)
    return np.divide(num, den, out=np.zeros(len(batch)), where=den > 0)


def transition_credit(batch: StepBatch, o: EstimatorOptions, ret: np.ndarray | None = None,
                      step_ret: np.ndarray | None = None) -> np.ndarray:
    """c_i = r_i + gamma Phi(next) - Phi(i) - pen_i, Phi = 0 after the last row (or Phi(i) on a truncated
    last row with bootstrap_truncated); scaled by 1 / (std_g(R) + epsilon) in mean_std_norm ('match_mode').
    ``ret``, ``step_ret``: R0 and R when the caller has them."""
    if o.bootstrap_truncated and o.max_steps is None:
        raise ValueError("progpo: bootstrap_truncated=True needs max_steps (the episode cap) to tell a "
                         "truncated trajectory from a finished one")
    phi = potentials(batch, o, ret)
    c = batch.reward + o.gamma * next_state_values(batch, phi, o) - phi - penalty(batch, o.invalid_penalty)
    if o.progpo_transition_norm == "match_mode" and o.mode == "mean_std_norm":
        R = step_returns(batch, o) if step_ret is None else step_ret
        c = c / (group_std(R, batch.view.group) + o.epsilon)
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
    ret = discounted_returns(batch, o.gamma)
    R = ret - penalty(batch, o.invalid_penalty)      # step_returns, from the R0 the potentials read too
    peer = group_normalize(R, prefix, mode=o.mode, epsilon=o.epsilon, ddof=1, equal_tol=o.equal_tol,
                           singleton="zero")
    if o.progpo_eta == 0:
        step = peer
    else:
        c = o.progpo_eta * transition_credit(batch, o, ret, R)
        if o.progpo_transition_scope == "all":
            step = peer + c
        else:
            step = np.where(np.bincount(prefix)[prefix] >= 2, peer, c)
    return episode_term(batch, o) + o.step_weight * step
