"""The per-step fields a verl sample carries, and our estimators on a verl DataProto.

    from agents.verl_bridge.steps import step_fields, compute_data_advantages
    extra_fields.update(step_fields(group=uid, traj=f"{uid}_{session}", step=t, anchor=info["anchor"], ...))
    data = compute_data_advantages(data, "gigpo", gamma=0.95)   # writes advantages and returns (N, T)

Layout: one verl sample per agent step (see ``agent_loop``). Each sample's ``extra_fields`` hold the
step's ``estimators.StepBatch`` row under the ``bipace_*`` names of ``STEP_KEYS``; the BiGPO hidden
state travels as the tensor ``bipace_embedding`` (N, d) next to ``response_mask``. The step advantage
of a sample is spread over its response tokens (``response_mask``), which is what verl's policy loss
reads: the same as ``estimators.broadcast_to_tokens`` in our own trainer.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import torch

from estimators import REGISTRY, StepBatch, compute_advantages, to_hashable

# extra_fields key -> StepBatch field
STEP_KEYS = {
    "bipace_group": "group_id",       # verl's uid: the n rollouts of one dataset row
    "bipace_traj": "traj_id",         # one rollout (uid + session id)
    "bipace_step": "step_idx",        # turn index in the episode
    "bipace_reward": "reward",        # mapped env reward of this step (10 on a win)
    "bipace_valid": "action_valid",   # response format valid (agents.parsing)
    "bipace_anchor": "anchor",        # hash of the env state acted on (GiGPO/HGPO/PACE groups)
    "bipace_action_key": "action_key",  # PACE action key (estimators.action_key)
}
EMBEDDING_KEY = "bipace_embedding"    # (N, d) float32, from the old-log-prob forward (worker.py)
# the anchor's text, clipped: the hindsight block's final observation (HCAPO/RELACE, hindsight.py) is the
# text of a trajectory's last step, which the anchor hash cannot give back
OBS_KEY, OBS_CHARS = "bipace_obs", 300      # 300 = agents.hindsight.HindsightSettings.final_obs_chars
# the projected action the env ran: the hindsight block's "Then: a_{t+1}; ..." (include_future_actions)
ACTION_KEY = "bipace_action"


def anchor_hash(anchor: Any) -> str:
    """A short stable id of an env state: verl moves extra_fields between processes, and a 40-character
    hash is cheaper to carry than ALFWorld's observation text while grouping the same way."""
    return hashlib.sha1(repr(to_hashable(anchor)).encode()).hexdigest()[:20]


def step_fields(group, traj, step: int, reward: float, valid: bool, anchor, action_key,
                action: str = "") -> dict:
    """The ``extra_fields`` entries of one step sample (``action``: the projected action the env ran)."""
    return {"bipace_group": str(group), "bipace_traj": str(traj), "bipace_step": int(step),
            "bipace_reward": float(reward), "bipace_valid": bool(valid), "bipace_anchor": anchor_hash(anchor),
            "bipace_action_key": str(action_key), OBS_KEY: str(anchor)[:OBS_CHARS], ACTION_KEY: str(action)}


def rows_from_non_tensor(non_tensor_batch: dict) -> list[dict]:
    """Per-sample step fields from a DataProto's non_tensor_batch: verl's V1 trainer keeps each sample's
    ``extra_fields`` dict whole, the V0 agent-loop worker spreads its keys into columns; accept both."""
    if "extra_fields" in non_tensor_batch:
        rows = [dict(r) if isinstance(r, dict) else {} for r in non_tensor_batch["extra_fields"]]
        if rows and all(k in rows[0] for k in STEP_KEYS):
            return rows
    if all(k in non_tensor_batch for k in STEP_KEYS):
        n = len(non_tensor_batch["bipace_group"])
        return [{k: non_tensor_batch[k][i] for k in STEP_KEYS} for i in range(n)]
    raise ValueError(f"the batch has no bipace step fields ({sorted(STEP_KEYS)}): its samples must come "
                     "from the bipace_env agent loop (rows with agent_name=bipace_env and "
                     "actor_rollout_ref.rollout.agent.agent_loop_config_path=agents/verl_bridge/config/"
                     "agent_loop.yaml)")


def step_batch(rows: list[dict], embedding=None, resp_len=None, old_logp_sum=None) -> StepBatch:
    """The StepBatch of N step samples, in the samples' order."""
    missing = sorted({k for r in rows for k in STEP_KEYS if k not in r})
    if missing:
        raise ValueError(f"step fields {missing} are missing from some samples; every sample must come from "
                         "the bipace_env agent loop")
    cols = {field: [r[key] for r in rows] for key, field in STEP_KEYS.items()}
    for field in ("anchor", "action_key"):
        arr = np.empty(len(rows), dtype=object)
        arr[:] = cols[field]
        cols[field] = arr
    if embedding is not None:
        embedding = (embedding.detach().float().cpu().numpy() if isinstance(embedding, torch.Tensor)
                     else np.asarray(embedding, dtype=np.float32))
    return StepBatch(group_id=np.asarray(cols["group_id"], dtype=object).astype(str),
                     traj_id=np.asarray(cols["traj_id"], dtype=object).astype(str),
                     step_idx=np.asarray(cols["step_idx"], dtype=np.int64),
                     reward=np.asarray(cols["reward"], dtype=np.float64),
                     action_valid=np.asarray(cols["action_valid"], dtype=bool),
                     anchor=cols["anchor"], action_key=cols["action_key"], embedding=embedding,
                     resp_len=resp_len, old_logp_sum=old_logp_sum)


def token_advantages(step_adv: np.ndarray, response_mask: torch.Tensor) -> torch.Tensor:
    """(N, T) float32: each sample's advantage on its response tokens, 0 on padding."""
    adv = torch.as_tensor(np.asarray(step_adv), dtype=torch.float32, device=response_mask.device)
    return adv[:, None] * response_mask.to(torch.float32)


def compute_data_advantages(data, estimator: str, padding=None, **options):
    """Our estimator on a verl DataProto of step samples; writes ``advantages`` and ``returns`` (N, T).

    ``padding`` (N,) bool marks samples verl added to fill the data-parallel size (copies of a real
    sample): they stay out of the estimator and get 0.

    ``returns`` equals ``advantages``, as verl's outcome estimators (GRPO, RLOO) write it. GACA's per-row
    scores come from the batch: ``resp_len`` from ``response_mask``, ``old_logp_sum`` from
    ``old_log_probs`` (the recomputed pi_old the PPO ratio uses)."""
    if estimator not in REGISTRY:
        raise ValueError(f"unknown estimator {estimator!r}; ours are {sorted(REGISTRY)}")
    mask = data.batch["response_mask"]
    needs = REGISTRY[estimator].needs
    emb = data.batch[EMBEDDING_KEY] if EMBEDDING_KEY in data.batch.keys() else None
    if "embedding" in needs and emb is None:
        raise ValueError(f"estimator {estimator!r} needs the policy's hidden states ({EMBEDDING_KEY}), "
                         "which the batch lacks. They are recorded in the old-log-prob forward by the bipace "
                         "actor worker, which the bipace trainer puts in place for this estimator: launch "
                         "with `python -m agents.verl_bridge.main` (trainer.v1.trainer_mode=sync), "
                         "keep algorithm.rollout_correction.bypass_mode=false (the forward must run), and "
                         "do not override the actor worker class")
    scores = {}
    if "old_logp_sum" in needs:
        if "old_log_probs" not in data.batch.keys():
            raise ValueError(f"estimator {estimator!r} needs old_log_probs in the batch (recompute them: "
                             "do not use rollout_correction bypass mode)")
        scores = {"resp_len": mask.sum(-1).cpu().numpy(),
                  "old_logp_sum": (data.batch["old_log_probs"].float() * mask).sum(-1).cpu().numpy()}
    rows = rows_from_non_tensor(data.non_tensor_batch)
    keep = np.ones(len(rows), bool) if padding is None else ~np.asarray(padding, dtype=bool)
    if keep.shape != (len(rows),):
        raise ValueError(f"padding must hold one flag per sample ({len(rows)}); got shape {keep.shape}")
    idx = np.flatnonzero(keep)
    batch = step_batch([rows[i] for i in idx], embedding=None if emb is None else emb[torch.as_tensor(idx)],
                       **{k: v[idx] for k, v in scores.items()})
    if "hind_logp_sum" in needs:      # HCAPO/RELACE: the hindsight scoring pass's sums (agents.hindsight)
        from agents.hindsight import data_hindsight_sums
        batch = batch.with_fields(hind_logp_sum=data_hindsight_sums(data)[idx])
    adv = np.zeros(len(rows))
    adv[idx] = compute_advantages(batch, estimator, **options)
    data.batch["advantages"] = token_advantages(adv, mask)
    data.batch["returns"] = data.batch["advantages"].clone()
    return data
