"""An example user estimator to copy (the contract: ``benchmarks/credit/user_estimator.py``). Score it with

    --estimator benchmarks.credit.example_estimator:step_mean_baseline
"""
from __future__ import annotations

import numpy as np

from estimators import grouping
from estimators.registry import step_returns


def step_mean_baseline(batch, options):
    """R_t minus the mean R of the rows that share its anchor within its rollout group (0 when alone)."""
    returns = step_returns(batch, options)             # discounted step returns, invalid rows penalised
    # one dense code per (rollout group, anchor): the same anchor groups as GiGPO's exact mode
    groups = grouping.dense_codes(batch.view.group, batch.field_codes("anchor"))
    count = np.bincount(groups).astype(float)
    total = np.bincount(groups, weights=returns)
    return returns - total[groups] / count[groups]     # only centres: options.mode is not read


# StepBatch fields it reads: a batch without anchors is reported as n/a instead of being run
step_mean_baseline.needs = ("anchor",)
step_mean_baseline.default_mode = "mean_norm"
