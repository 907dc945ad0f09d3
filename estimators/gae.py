"""GAGPO (arXiv 2605.13217): GAE over a critic-free grouped value proxy (spec-2 section 1).

Built from the published description, not released code (none exists): every formula the sources do
not give is an [ASSUMPTION] of the spec and an option of `EstimatorOptions` with its stated default.

    V(k)  = mean discounted return R of the rows in anchor group k        (value_proxy)
    delta = r_t + gamma * V_{t+1} - V_t,   V after the last row = 0          (bootstrap_truncated)
    A_hat = GAE(delta, gamma * lambda) - penalty_t                          (gae_lambda)
    A     = normalise(A_hat within norm_scope) + episode_weight * A^E      (norm_scope, episode_weight)
"""
from __future__ import annotations

import numpy as np

from . import grouping
from .batch import StepBatch
from .registry import STEP_PARTITIONS, EstimatorOptions, episode_term, register
from .returns import backward_discount, discounted_returns, group_normalize, next_state_values, penalty


def _anchor_groups(batch: StepBatch, o: EstimatorOptions, estimator: str) -> np.ndarray:
    if o.enable_similarity:
        return grouping.similarity_anchor_groups(batch, o.similarity_thresh, estimator)
    return grouping.exact_anchor_groups(batch, estimator)


STEP_PARTITIONS["gagpo"] = lambda b, o: _anchor_groups(b, o, "gagpo")


def grouped_values(returns: np.ndarray, groups: np.ndarray, value_proxy: str) -> np.ndarray:
    """V per row: the mean return of its group ('mean'), or of the group without the row ('loo_mean';
    a row alone in its group keeps its own return)."""
    count = np.bincount(groups).astype(np.float64)[groups]
    total = np.bincount(groups, weights=returns)[groups]
    if value_proxy == "mean":
        return total / count
    return np.where(count > 1, (total - returns) / np.maximum(count - 1, 1), returns)


def gae_advantages(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """The penalised, un-normalised GAE advantages A_hat of every row."""
    if not 0.0 <= o.gae_lambda <= 1.0:
        raise ValueError(f"gae_lambda must be in [0, 1]; got {o.gae_lambda}")
    if o.bootstrap_truncated and o.max_steps is None:
        raise ValueError("gagpo: bootstrap_truncated=True needs max_steps (the episode cap) to tell a "
                         "truncated trajectory from a finished one")
    pen = penalty(batch, o.invalid_penalty)
    returns = discounted_returns(batch, o.gamma)
    # penalties stay out of V by default so that format errors do not bias the state values
    values = grouped_values(returns - pen if o.value_proxy_penalised else returns,
                            _anchor_groups(batch, o, "gagpo"), o.value_proxy)
    delta = batch.reward + o.gamma * next_state_values(batch, values, o) - values
    # the penalty hits only its own row after the recursion, like verl-agent's post-discount penalty
    return backward_discount(batch, delta, o.gamma * o.gae_lambda) - pen


SCOPES = {
    "episode_group": lambda b, o: b.view.group,
    "anchor_group": lambda b, o: _anchor_groups(b, o, "gagpo"),
    "batch": lambda b, o: np.zeros(len(b), dtype=np.int64),
}


@register("gagpo", needs=("anchor",))
def gagpo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """GAGPO: GAE over the anchor groups' mean returns, normalised per episode group (spec-2 section 1).

    At gae_lambda=1, norm_scope='none', episode_weight=0 the telescoped advantage is R_t - V(s_t) - pen_t:
    GiGPO's mean_norm step term on rows whose anchor group has >= 2 members (exactly, with
    value_proxy_penalised=True). At lambda < 1 a row alone in its anchor group still gets a signal from
    the next state's group value, where GiGPO gives 0.
    """
    adv = gae_advantages(batch, o)
    if o.norm_scope != "none":
        # a one-member scope keeps its value (GRPO's singleton rule), so lone rows keep their signal
        adv = group_normalize(adv, SCOPES[o.norm_scope](batch, o), mode=o.mode, epsilon=o.epsilon, ddof=1,
                              equal_tol=o.equal_tol, singleton="raw")
    if o.episode_weight != 0:
        adv = adv + o.episode_weight * episode_term(batch, o)
    return adv
