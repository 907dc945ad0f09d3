"""How close an estimator's advantages are to a ground-truth advantage, row by row; shared by
``estimator_quality.py`` (exact DP values on text MDPs) and ``advantage_accuracy.py`` (Monte-Carlo values on
real rollouts), so both score estimators the same way.

    corr(est, true); spearman(est, true); sign_agreement(est, true, keep); nmse(est, true)
    nmse_scaled(est, true)        # after the least-squares scale: estimators normalise differently
    impure_rate(codes, labels)    # share of rows whose step group mixes states of different value
"""
from __future__ import annotations

import numpy as np


def corr(est: np.ndarray, true: np.ndarray) -> float:
    """Pearson correlation; 0 for a constant estimate, which carries no information about A."""
    if est.std() == 0 or true.std() == 0:
        return 0.0
    return float(np.corrcoef(est, true)[0, 1])


def ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), as Spearman's rho needs."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    first = np.r_[True, xs[1:] != xs[:-1]]
    start = np.flatnonzero(first)
    ends = np.r_[start[1:], len(x)]
    avg = (start + ends - 1) / 2.0
    out = np.empty(len(x))
    out[order] = np.repeat(avg, ends - start)
    return out


def spearman(est: np.ndarray, true: np.ndarray) -> float:
    return corr(ranks(est), ranks(true))


def nmse(est: np.ndarray, true: np.ndarray) -> float:
    """sum (est - A)^2 / sum A^2: 1.0 = no better than predicting 0."""
    return float(np.sum((est - true) ** 2) / max(np.sum(true ** 2), 1e-12))


def nmse_scaled(est: np.ndarray, true: np.ndarray) -> float:
    """NMSE of c * est with the least-squares c (1 - cos^2 of the two vectors): how much of A no rescaling
    of the estimate explains, since estimators normalise by different scales."""
    ee, aa = float(est @ est), float(true @ true)
    if ee == 0 or aa == 0:
        return 1.0
    return float(1.0 - (est @ true) ** 2 / (ee * aa))


def sign_agreement(est: np.ndarray, true: np.ndarray, keep: np.ndarray | None = None) -> float:
    """Share of rows (``keep``; default |A| > 1e-6) where the estimate has A's sign; a 0 estimate counts as
    wrong. NaN without such rows."""
    keep = np.abs(true) > 1e-6 if keep is None else keep
    if not keep.any():
        return float("nan")
    return float(np.mean(np.sign(est[keep]) == np.sign(true[keep])))


def impure_rate(codes: np.ndarray, distinct) -> float:
    """Share of rows whose step group holds two rows of different states: ``distinct(rows)`` says, for
    the rows of one group, whether any two differ (by latent state, or by value beyond its error)."""
    return float(impure_rows(codes, distinct).mean()) if len(codes) else float("nan")


def impure_rows(codes: np.ndarray, distinct) -> np.ndarray:
    """Per row: does its step group hold two rows ``distinct`` calls different (see ``impure_rate``)."""
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1], True])
    impure = np.zeros(len(codes), dtype=bool)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        rows = order[lo:hi]
        if hi - lo > 1 and distinct(rows):
            impure[rows] = True
    return impure
