"""95% intervals shared by the benchmark reports (``learning/compare.py``, ``learning/table_report.py``,
``learning/env_table_report.py``, ``speed/sft_cost.py``)."""
from __future__ import annotations

import math

import numpy as np

# two-sided 95% Student t quantiles by degrees of freedom
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def t975(dof: int) -> float:
    """97.5% quantile of Student's t: tabled up to 10 degrees of freedom, above that a Cornish-Fisher
    expansion (within 0.003 of the exact value)."""
    if dof < 1:
        raise ValueError(f"a t-interval needs at least 1 degree of freedom (2 values); got {dof}")
    if dof in T975:
        return T975[dof]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)


def ci95(p: float, n: float) -> float:
    """Half-width of the normal-approximation 95% interval of a success rate over n episodes (NaN when
    there are none)."""
    return 1.96 * math.sqrt(max(p * (1 - p), 0.0) / n) if n else float("nan")


def mean_ci95(x) -> tuple[float, float]:
    """Mean and half-width of its 95% t interval (0 for fewer than 2 values)."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < 2:
        return float(x.mean()) if len(x) else 0.0, 0.0
    return float(x.mean()), float(t975(len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


# 95% quantiles of the chi-square distribution by degrees of freedom
CHI2_95 = {1: 3.841, 2: 5.991, 3: 7.815, 4: 9.488, 5: 11.070, 6: 12.592, 7: 14.067, 8: 15.507, 9: 16.919,
           10: 18.307}


def chi2_95(dof: int) -> float:
    """95% quantile of chi-square: tabled up to 10 degrees of freedom, above that Wilson-Hilferty's cube
    approximation (within 0.3% there)."""
    if dof < 1:
        raise ValueError(f"a chi-square quantile needs at least 1 degree of freedom; got {dof}")
    if dof in CHI2_95:
        return CHI2_95[dof]
    z = 1.644854
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


def kendall_tau_b(a, b) -> float:
    """Kendall's tau-b of two equally long score lists, ties corrected: the concordant minus discordant
    pairs over sqrt(pairs untied in a x pairs untied in b); NaN with fewer than 3 items or a constant
    list. O(n^2) pairs, meant for the tens of estimators a leaderboard ranks."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"kendall_tau_b takes two equally long 1-d lists; got shapes {a.shape}, {b.shape}")
    if len(a) < 3:
        return math.nan
    upper = np.triu_indices(len(a), k=1)
    da, db = np.sign(np.subtract.outer(a, a)[upper]), np.sign(np.subtract.outer(b, b)[upper])
    untied = float(np.sum(da != 0)) * float(np.sum(db != 0))
    return float(np.sum(da * db) / math.sqrt(untied)) if untied > 0 else math.nan
