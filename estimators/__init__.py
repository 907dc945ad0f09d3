"""Credit-assignment estimators for multi-turn LLM agents, as pure functions over step records.

    from estimators import StepBatch, compute_advantages, available_estimators
    batch = StepBatch(group_id, traj_id, step_idx, reward, action_valid,
                      anchor=None, action_key=None, embedding=None)
    adv = compute_advantages(batch, "bipace", gamma=0.95, mode="mean_norm", eps=0.05)

Estimators: grpo, gigpo, hgpo, bigpo, pace, bipace (spec: ../shared/specs/estimators.md); rloo and
reinforce_pp (verl's semantics); gagpo, graphhca, gaca, hcapo, relace (../shared/specs/estimators-2.md)
and ecpo, progpo, gated_bepo (../shared/specs/estimators-3.md), from the published descriptions, not
released code. hcapo and relace read `hind_logp_sum`, which the scoring pass `agents.hindsight` fills.
gigpo_goal and pace_goal (one step group per goal, `coarse.py`) are controls of the hidden-state study.
"""
from .batch import StepBatch, to_hashable
from .keys import EMPTY_KEY, INVALID_KEY, action_key, broadcast_to_tokens
from .registry import (REGISTRY, EstimatorOptions, available_estimators, compute_advantages,
                       resolve_options, step_groups, step_returns)
from .grouping import bigpo_clusters, exact_anchor_groups, history_groups, similarity_anchor_groups
# modules that register more estimators (imported for their side effect on REGISTRY)
from . import bepo, coarse, ecpo, gaca, gae, graph, hcapo, outcome, progpo  # noqa: E402,F401

__all__ = [
    "StepBatch", "to_hashable", "compute_advantages", "available_estimators", "EstimatorOptions",
    "REGISTRY", "resolve_options", "step_groups", "step_returns", "action_key", "broadcast_to_tokens",
    "INVALID_KEY",
    "EMPTY_KEY", "bigpo_clusters", "exact_anchor_groups", "history_groups", "similarity_anchor_groups",
]
