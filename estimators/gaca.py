"""GACA (arXiv 2609.12424): a per-step mixture of episode- and step-level advantages, weighted by how
uncertain the policy was (spec-2 section 3).

Built from the published description (an abstract), not released code (none was found); every
[ASSUMPTION] of the spec is an option of `EstimatorOptions` with its stated default.

    nll_t   = -old_logp_sum_t / resp_len_t            mean per-token NLL of the row's response
    c_t     = sigmoid(kappa * z_t), z = within-trajectory z-score of nll (population std)   (crit_norm)
    alpha_t = c_t, 0 on rows alone in their anchor group, empty or invalid responses
    A_t     = (1 - alpha_t) A^E_t + alpha_t * step_weight * A^S_t   (A^S: GiGPO's step term)

The log-probs are the rollout policy's (the trainer's old log-probs, computed once per batch), so no
extra forward pass is needed.
"""
from __future__ import annotations

import numpy as np

from .batch import StepBatch
from .gae import _anchor_groups
from .registry import STEP_PARTITIONS, EstimatorOptions, episode_term, register, step_norm_term

# a trajectory whose NLLs span less than this (relative) is flat: criticality 0.5 everywhere, instead of
# a z-score of round-off
FLAT_TOL = 1e-9

STEP_PARTITIONS["gaca"] = lambda b, o: _anchor_groups(b, o, "gaca")


def _traj_stats(nll: np.ndarray, scored: np.ndarray, traj: np.ndarray, n_trajs: int):
    """Mean, population std, min and max of the scored rows' NLL per trajectory (per row)."""
    w = scored.astype(np.float64)
    count = np.bincount(traj, weights=w, minlength=n_trajs)
    mean = np.bincount(traj, weights=w * nll, minlength=n_trajs) / np.maximum(count, 1)
    var = np.bincount(traj, weights=w * (nll - mean[traj]) ** 2, minlength=n_trajs) / np.maximum(count, 1)
    hi = np.full(n_trajs, -np.inf)
    lo = np.full(n_trajs, np.inf)
    np.maximum.at(hi, traj[scored], nll[scored])
    np.minimum.at(lo, traj[scored], nll[scored])
    flat = (hi - lo <= FLAT_TOL * np.maximum(1.0, np.abs(hi))) | (count < 2)
    return mean[traj], np.sqrt(var)[traj], lo[traj], hi[traj], flat[traj]


def _zscore_sigmoid(nll, mean, std, lo, hi, flat, o):
    z = np.where(flat, 0.0, (nll - mean) / (std + o.epsilon))
    # rows outside the statistics (empty, invalid) get alpha 0 later, but their z can be huge: clip
    # where the sigmoid is saturated anyway so exp cannot overflow
    return 1.0 / (1.0 + np.exp(np.clip(-o.crit_kappa * z, -60.0, 60.0)))


def _minmax(nll, mean, std, lo, hi, flat, o):
    return np.where(flat, 0.5, (nll - lo) / np.where(flat, 1.0, hi - lo + o.epsilon))


def _mean_ratio(nll, mean, std, lo, hi, flat, o):
    if not o.crit_cmax > 0:
        raise ValueError(f"crit_cmax must be > 0; got {o.crit_cmax}")
    ratio = np.divide(nll, mean, out=np.ones_like(nll), where=mean > 0)   # all-zero NLL: average criticality
    return np.clip(ratio, 0.0, o.crit_cmax) / o.crit_cmax


CRITICALITY = {
    "zscore_sigmoid": _zscore_sigmoid,
    "minmax": _minmax,
    "mean_ratio": _mean_ratio,
    "const0": lambda *args: None,          # alpha = 0 everywhere (the GRPO reduction hook)
}


def mixing_weights(batch: StepBatch, o: EstimatorOptions, groups: np.ndarray) -> np.ndarray:
    """alpha_t in [0, 1] per row (spec-2 3.3 steps 1-3 and 6)."""
    length = batch.resp_len
    scored = length > 0
    if o.exclude_invalid_from_norm:
        scored &= batch.action_valid          # a format failure must not inflate valid steps' z-scores
    nll = np.where(length > 0, -batch.old_logp_sum / np.maximum(length, 1), 0.0)
    view = batch.view
    crit = CRITICALITY[o.crit_norm](nll, *_traj_stats(nll, scored, view.traj, view.n_trajs), o)
    if crit is None:
        return np.zeros(len(batch))
    alpha = 1.0 - crit if o.crit_invert else crit
    alpha = np.where(scored, alpha, 0.0)
    if o.singleton_alpha == "zero":
        # the step term is 0 on a lone row; mixing would only shrink A^E there
        alpha = np.where(np.bincount(groups)[groups] >= 2, alpha, 0.0)
    return alpha


COMBINE = {
    "mixture": lambda episode, step, alpha, w: (1.0 - alpha) * episode + alpha * w * step,
    "additive_weighted": lambda episode, step, alpha, w: episode + 2.0 * alpha * w * step,
}


@register("gaca", needs=("anchor", "resp_len", "old_logp_sum"))
def gaca(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """GACA: (1 - alpha) A^E + alpha * w * A^S with alpha from the response's within-trajectory NLL
    (spec-2 section 3). alpha = 0 (crit_norm='const0') gives GRPO; alpha = 0.5 with
    gaca_combine='additive_weighted' gives GiGPO."""
    groups = STEP_PARTITIONS["gaca"](batch, o)
    alpha = mixing_weights(batch, o, groups)
    step = step_norm_term(batch, o, groups)
    return COMBINE[o.gaca_combine](episode_term(batch, o), step, alpha, o.step_weight)
