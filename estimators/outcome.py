"""Outcome-level baselines from verl: RLOO and REINFORCE++ (no step grouping, no extra inputs).

Both follow verl's ``core_algos`` facts (``compute_rloo_outcome_advantage``,
``compute_reinforce_plus_plus_outcome_advantage``), mapped onto step records as each docstring says.
"""
from __future__ import annotations

import numpy as np

from .batch import StepBatch
from .registry import EstimatorOptions, register, step_returns
from .returns import flat_groups, penalty

# verl's masked_whiten adds this to the variance (a constant there, not an option).
WHITEN_EPS = 1e-8


@register("rloo")
def rloo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """RLOO: A_i = s_i - mean of the episode returns of the *other* trajectories of the group.

    verl's rule on n samples of one prompt is n/(n-1) * (s_i - mean) = s_i - mean(others), and a lone
    sample keeps its raw score. Here a sample is a trajectory: the leave-one-out leaves out the row's
    whole trajectory (not just the row, which would leave its own outcome in the baseline), and every
    other trajectory counts once, with its undiscounted episode return. The row's invalid-action
    penalty is subtracted from its own score only (s_i = R_ep - c * invalid_i, as GRPO's s_i), so
    without penalties this is verl's formula exactly. A group with one trajectory gives the raw score
    (`singleton_episode='raw'`, verl) or 0 ('zero'). No std normalisation: `mode` is not used.
    Groups whose episode returns are equal within `equal_tol` get exactly -penalty (float guard).
    """
    view = batch.view
    episode = np.bincount(view.traj, weights=batch.reward, minlength=view.n_trajs)
    traj_group = np.zeros(view.n_trajs, dtype=np.int64)
    traj_group[view.traj] = view.group
    n_traj = np.bincount(traj_group, minlength=view.n_groups)
    total = np.bincount(traj_group, weights=episode, minlength=view.n_groups)
    others = (n_traj - 1)[view.group]
    own = episode[view.traj]
    centred = own - (total[view.group] - own) / np.maximum(others, 1)
    if o.equal_tol is not None:
        flat = flat_groups(episode, traj_group, view.n_groups, o.equal_tol)
        centred = np.where(flat[view.group], 0.0, centred)
    lone = own if o.singleton_episode == "raw" else 0.0
    return np.where(others > 0, centred, lone) - penalty(batch, o.invalid_penalty)


@register("reinforce_pp")
def reinforce_pp(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """REINFORCE++: discounted returns whitened over the whole batch, no group baseline.

    verl discounts the token-level rewards over the tokens of a response with gamma and whitens them
    over every valid token of the batch (mean, unbiased variance, (x - mean) / sqrt(var + 1e-8)). For
    step records the natural analogue, used here: R_t = sum_k gamma^k r_{t+k} over the steps of each
    trajectory (with the post-discount invalid penalty, as every step-level estimator here), whitened
    over all step rows of the batch; every token of a row then gets the row's value. `mode` is not
    used. One row, or rows whose returns are equal within `equal_tol`, give 0.
    """
    returns = step_returns(batch, o)
    n = len(returns)
    centred = returns - returns.mean()
    flat = o.equal_tol is not None and flat_groups(returns, np.zeros(n, dtype=np.int64), 1, o.equal_tol)[0]
    if n < 2 or flat:
        return np.zeros(n)
    return centred / np.sqrt(returns.var(ddof=1) + WHITEN_EPS)
