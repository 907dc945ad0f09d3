"""Step terms within any given partition, and the coarsest one: a single step group per goal.

    adv = within_partition(batch, codes, "pace", gamma=0.95, mode="mean_norm")   # PACE's formula in `codes`
    adv = compute_advantages(batch, "pace_goal", gamma=0.95)                      # one group per goal

`gigpo_goal` and `pace_goal` are the controls of the hidden-state study (docs/advantage-accuracy.md,
"BiPACE at the paper's setting"): at the paper's radius SmolLM2's states of a goal fall into one cluster,
so BiGPO and BiPACE become these two. Scoring them apart from BiGPO/BiPACE tells coarser groups from
hidden-state geometry. `within_partition` scores BiGPO's and BiPACE's formulas on any partition (a sweep's
clusters, or size-matched random ones) without re-clustering.
"""
from __future__ import annotations

import numpy as np

from .batch import StepBatch, missing_field_error
from .grouping import dense_codes
from .registry import (STEP_PARTITIONS, episode_term, pace_step_term, register, resolve_options,
                       step_norm_term, step_returns)

FORMULAS = ("gigpo", "pace")


def goal_groups(batch: StepBatch) -> np.ndarray:
    """One step group per rollout group (goal): each row's step term compares it with all of its goal."""
    return dense_codes(batch.view.group)


def check_partition(batch: StepBatch, codes: np.ndarray) -> np.ndarray:
    codes = np.asarray(codes)
    if codes.shape != (len(batch),) or not np.issubdtype(codes.dtype, np.integer) or (codes < 0).any():
        raise ValueError(f"a partition is one int code >= 0 per row ({len(batch)} rows); got shape "
                         f"{codes.shape}, dtype {codes.dtype}")
    pairs = dense_codes(codes, batch.view.group)
    if len(np.unique(pairs)) != len(np.unique(codes)):
        raise ValueError("a partition's step groups must not cross rollout groups (goals): some code holds "
                         "rows of two goals; give each goal its own codes")
    return dense_codes(codes)


def within_partition(batch: StepBatch, codes: np.ndarray, formula: str, **options) -> np.ndarray:
    """A^E + w * the step term of ``formula`` ('gigpo': normalised step return, as GiGPO/BiGPO; 'pace':
    action-conditioned peer baseline, as PACE/BiPACE) within the step groups ``codes``."""
    if formula not in FORMULAS:
        raise ValueError(f"unknown formula {formula!r}; expected one of {FORMULAS}")
    o = resolve_options("gigpo" if formula == "gigpo" else "pace", **options)
    codes = check_partition(batch, codes)
    if formula == "gigpo":
        step = step_norm_term(batch, o, codes)
    else:
        if batch.action_key is None:
            raise missing_field_error("pace", "action_key")
        step = pace_step_term(step_returns(batch, o), codes, batch.action_key, o)
    return episode_term(batch, o) + o.step_weight * step


STEP_PARTITIONS["gigpo_goal"] = lambda b, o: goal_groups(b)
STEP_PARTITIONS["pace_goal"] = lambda b, o: goal_groups(b)


@register("gigpo_goal")
def gigpo_goal(batch: StepBatch, o) -> np.ndarray:
    """Control: GiGPO's formula with one step group per goal (every row's return against its goal's)."""
    return episode_term(batch, o) + o.step_weight * step_norm_term(batch, o, goal_groups(batch))


@register("pace_goal", needs=("action_key",))
def pace_goal(batch: StepBatch, o) -> np.ndarray:
    """Control: PACE's formula with one step group per goal (action keys pooled over the goal's rows)."""
    step = pace_step_term(step_returns(batch, o), goal_groups(batch), batch.action_key, o)
    return episode_term(batch, o) + o.step_weight * step
