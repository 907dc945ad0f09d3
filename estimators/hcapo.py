"""HCAPO (arXiv 2603.08754) and RELACE: hindsight credit from teacher-forced likelihoods under an
outcome-augmented prompt (spec-2 sections 4 and 5), the pure-function half.

The scoring pass that fills `StepBatch.hind_logp_sum` (one teacher-forced forward per scored row under the
prompt with a hindsight block) is `agents.hindsight`; these functions only read its per-row sums. Both
papers are known from abstracts and summaries only: every formula is an [ASSUMPTION] of spec-2 and an
option of `EstimatorOptions` with its stated default.

    l_t   = clip((hind_logp_sum - old_logp_sum) / resp_len, +-ratio_clip)          (ratio_unit, ratio_clip)
    rho_t = exp(l_t) / mean_{t' in traj} exp(l_t')         self-normalised in the trajectory
    HCAPO: Q = rho * Z (Z = episode reward on success, else 0); A^mu = Q - mean_group Q;
           A = A^E + omega * mask(smooth(A^mu))
    RELACE: R~ = clip(rho, 0, f_max) * R0 - pen; A^L = norm(R~ within anchor groups);
           A = w_E A^E + omega * mask(smooth(A^L))
"""
from __future__ import annotations

import numpy as np

from .batch import StepBatch
from .gae import _anchor_groups
from .registry import STEP_PARTITIONS, EstimatorOptions, episode_term, register
from .returns import discounted_returns, group_normalize, group_std, next_row, penalty, trajectory_outcome

STEP_PARTITIONS["relace"] = lambda b, o: _anchor_groups(b, o, "relace")
KERNEL3 = (0.25, 0.5, 0.25)


def hindsight_ratio(batch: StepBatch, o: EstimatorOptions, estimator: str,
                    scored_failures: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(rho per row, success per row). rho is 1 on rows whose trajectory is not used: failures of HCAPO
    and, for RELACE, failures left unscored (NaN anywhere in the trajectory). A successful row without a
    score is an error, never a silent zero."""
    if not o.ratio_clip > 0:
        raise ValueError(f"ratio_clip must be > 0; got {o.ratio_clip}")
    success, _ = trajectory_outcome(batch, o.success_threshold, o.max_steps)
    hind = batch.hind_logp_sum
    missing = np.isnan(hind)
    bad = np.flatnonzero(missing & success)
    if bad.size:
        raise ValueError(f"{estimator}: rows {bad[:10].tolist()} belong to successful trajectories but have "
                         "no hind_logp_sum (NaN); the hindsight scoring pass (agents.hindsight."
                         "score_hindsight) must score every row of a successful trajectory")
    view = batch.view
    traj_missing = np.bincount(view.traj, weights=missing, minlength=view.n_trajs)[view.traj] > 0
    used = success | (scored_failures & ~traj_missing)
    diff = np.where(missing, 0.0, hind - batch.old_logp_sum)
    if o.ratio_unit == "mean":
        diff = diff / np.maximum(batch.resp_len, 1)
    ell = np.where(batch.resp_len > 0, np.clip(diff, -o.ratio_clip, o.ratio_clip), 0.0)
    w = np.exp(ell)
    mean = np.bincount(view.traj, weights=w, minlength=view.n_trajs) / np.bincount(view.traj)
    return np.where(used, w / mean[view.traj], 1.0), success


def smooth(batch: StepBatch, values: np.ndarray, kind: str) -> np.ndarray:
    """Temporal smoothing within each trajectory: the (0.25, 0.5, 0.25) kernel, renormalised at the ends."""
    if kind == "none":
        return values
    nxt = next_row(batch)
    prv = np.full(len(batch), -1, dtype=np.int64)
    prv[nxt[nxt >= 0]] = np.flatnonzero(nxt >= 0)
    left, mid, right = KERNEL3
    total = mid * values + np.where(prv >= 0, left * values[np.maximum(prv, 0)], 0.0) \
        + np.where(nxt >= 0, right * values[np.maximum(nxt, 0)], 0.0)
    weight = mid + left * (prv >= 0) + right * (nxt >= 0)
    return total / weight


def _finish(batch: StepBatch, term: np.ndarray, success: np.ndarray, o: EstimatorOptions) -> np.ndarray:
    """Smoothing, then the do-no-harm / success-protecting mask (the mask has the final word)."""
    term = smooth(batch, term, o.smooth)
    return np.where(success, np.maximum(term, 0.0), term) if o.success_mask else term


@register("hcapo", needs=("resp_len", "old_logp_sum", "hind_logp_sum"), default_mode="mean_std_norm")
def hcapo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """HCAPO: A^E (GRPO) + omega * micro term, the hindsight Q = rho * Z of successful runs against the
    group's mean Q (spec-2 section 4). omega = 0 is GRPO; a group without success gives A^E."""
    rho, success = hindsight_ratio(batch, o, "hcapo")
    view = batch.view
    if o.hcapo_z == "episode":
        z = np.bincount(view.traj, weights=batch.reward, minlength=view.n_trajs)[view.traj]
    else:
        z = discounted_returns(batch, o.gamma)
    q = np.where(success, rho * z, 0.0)
    scope = view.group if o.hcapo_scope == "group" else np.zeros(len(batch), dtype=np.int64)
    micro = q - (np.bincount(scope, weights=q) / np.bincount(scope))[scope]
    micro = _finish(batch, micro, success, o)
    if o.micro_norm == "group_std":
        micro = micro / (group_std(micro, view.group) + o.epsilon)
    return episode_term(batch, o) + o.step_weight * micro


@register("relace", needs=("anchor", "resp_len", "old_logp_sum", "hind_logp_sum"))
def relace(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """RELACE: w_E A^E + omega * local term, GiGPO's step term over returns reweighted by the trajectory-
    normalised retrospective factor (spec-2 section 5). f = 1 with smoothing and mask off is GiGPO."""
    f, success = hindsight_ratio(batch, o, "relace", scored_failures=True)
    if o.relace_f_max is not None:
        if not o.relace_f_max > 0:
            raise ValueError(f"relace_f_max must be > 0 or None; got {o.relace_f_max}")
        f = np.clip(f, 0.0, o.relace_f_max)
    weighted = f * discounted_returns(batch, o.gamma) - penalty(batch, o.invalid_penalty)
    local = group_normalize(weighted, STEP_PARTITIONS["relace"](batch, o), mode=o.mode, epsilon=o.epsilon,
                            ddof=1, equal_tol=o.equal_tol, singleton="zero")
    local = _finish(batch, local, success, o)
    return o.relace_episode_weight * episode_term(batch, o) + o.step_weight * local
