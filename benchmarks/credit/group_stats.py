"""Step-group statistics of an estimator on a batch: which rows it compares with which, and how often a
row is alone (a singleton gets no step-level signal). Shared by ``estimator_quality.py`` and
``compare.py``.

    codes = step_groups(batch, "bigpo", eps=0.05)      # estimators.step_groups: per-row group, None for GRPO
    stats = group_stats(batch, codes)                  # singleton_rate, clusters_per_group, mean_group_size
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from estimators import StepBatch, step_groups  # noqa: F401  (re-exported: the partition each estimator uses)


def group_stats(batch: StepBatch, codes: Optional[np.ndarray]) -> dict:
    """singleton_rate: share of step rows whose step group has one member; clusters_per_group: step
    groups per rollout group (task); mean_group_size: step rows per step group. NaN without groups."""
    if codes is None or len(codes) == 0:
        return {"singleton_rate": float("nan"), "clusters_per_group": float("nan"),
                "mean_group_size": float("nan")}
    sizes = np.bincount(codes)
    used = sizes > 0
    return {"singleton_rate": float(np.mean(sizes[codes] == 1)),
            "clusters_per_group": float(used.sum() / batch.view.n_groups),
            "mean_group_size": float(sizes[used].mean())}
