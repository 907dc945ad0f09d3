"""Step-group statistics of an estimator on a batch: which rows it compares with which, and how often a
row is alone (a singleton gets no step-level signal). Shared by ``estimator_quality.py`` and
``compare.py``.

    codes = step_groups(batch, "bigpo", eps=0.05)      # dense int group per row, or None for GRPO
    stats = group_stats(batch, codes)                  # singleton_rate, clusters_per_group, mean_group_size
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from estimators import StepBatch, grouping, resolve_options

# estimator -> the partition its step term normalises within (HGPO: level 1, the coarsest level; a row
# alone at level 1 is alone at every level, so it gets 0 exactly like a GiGPO singleton).
STEP_GROUPS: dict[str, Callable] = {
    "gigpo": lambda b, o: (grouping.similarity_anchor_groups(b, o.similarity_thresh) if o.enable_similarity
                           else grouping.exact_anchor_groups(b)),
    "hgpo": lambda b, o: grouping.history_groups(b, 1),
    "pace": lambda b, o: grouping.exact_anchor_groups(b, "pace"),
    "bigpo": lambda b, o: grouping.bigpo_clusters(b, o.eps),
    "bipace": lambda b, o: grouping.bigpo_clusters(b, o.eps, "bipace"),
}


def step_groups(batch: StepBatch, estimator: str, **options) -> Optional[np.ndarray]:
    """Dense step-group code per row (never shared across rollout groups), or None for an estimator
    without a step-level partition (GRPO)."""
    o = resolve_options(estimator, **options)
    fn = STEP_GROUPS.get(estimator)
    return None if fn is None else fn(batch, o)


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
