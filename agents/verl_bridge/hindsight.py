"""The hindsight scoring pass of HCAPO and RELACE inside verl's advantage step (spec-2 sections 4.2, 5.2).

    BipacePPOTrainer._compute_advantage -> actor_hindsight_sums(actor_wg, batch, rows, padding, tok, s)

For an estimator whose ``needs`` hold ``hind_logp_sum`` the trainer runs this before the estimator: the
outcome-augmented prompt x~ of every scored step sample is built with ``agents.hindsight``'s own
augmentation (the block before the chat template's generation prompt; won trajectories only unless
``score_failures``), and the response tokens y are teacher-forced under x~ by the actor through verl's
own worker call, ``actor_wg.compute_log_prob``: the samples go into the TransferQueue under a partition of
their own, laid out as verl's agent-loop worker stores a step (unpadded prompt + response), and the call
returns their per-token log-probs there, at the rollout temperature, in eval mode, in verl's micro-batches
and data-parallel dispatch. Their sums (NaN on rows not scored) become ``StepBatch.hind_logp_sum``.

Options: ``+bipace.hindsight={score_failures: true, max_prompt_tokens: 4096}`` (fields of
``agents.hindsight.HindsightSettings``; the temperature defaults to the rollout's, the success threshold to
the estimator's). ``include_future_actions`` reads the projected actions the agent loop stores in each step
sample (``steps.ACTION_KEY``); ``save_dir`` writes what was scored. Not here: prefix sharing, since verl's
``compute_log_prob`` runs every sample whole (with ``use_remove_padding`` it packs them, so no padding is
run, but rows of one task still run their common prefix once each); ``micro_batch_rows`` is verl's
``log_prob_micro_batch_size_per_gpu``.
"""
from __future__ import annotations

import time
import types
from uuid import uuid4

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from agents.hindsight import HindsightSettings, augmented_prompts, save_scored
from agents.verl_bridge.steps import ACTION_KEY, OBS_KEY, step_batch

PARTITION = "bipace_hindsight"


def hindsight_settings(config, estimator_options: dict) -> HindsightSettings:
    """``bipace.hindsight`` of the run config over the rollout temperature and the estimator's
    success threshold."""
    opts = (config.get("bipace", None) or {}).get("hindsight", None) or {}
    opts = dict(OmegaConf.to_container(opts, resolve=True) if OmegaConf.is_config(opts) else opts)
    known = set(HindsightSettings.__dataclass_fields__)
    unknown = sorted(set(opts) - known)
    if unknown:
        raise ValueError(f"bipace.hindsight has unknown keys {unknown}; known: {sorted(known)}")
    ignored = {"share_prefix": "verl's forward runs each sample whole",
               "micro_batch_rows": "set actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"}
    here = sorted(set(opts) & set(ignored))
    if here:
        raise ValueError(f"bipace.hindsight.{here[0]} does not apply under verl ({ignored[here[0]]}); "
                         "remove it")
    opts.setdefault("temperature", float(config.actor_rollout_ref.rollout.temperature))
    opts.setdefault("success_threshold", float(estimator_options.get("success_threshold", 0.0)))
    return HindsightSettings(**opts)


def _per_row(t: torch.Tensor) -> list[torch.Tensor]:
    """A TransferQueue field as one 1-D tensor per sample (jagged nested, or dense when equally long)."""
    return list(t.unbind(0))


def hindsight_prompts(rows: list[dict], prompts: list[torch.Tensor], tok, s: HindsightSettings):
    """(row -> x~, prompts truncated) for the step samples ``rows`` (their ``extra_fields``; no padding
    copies) and their prompt token ids."""
    missing = [i for i, r in enumerate(rows) if OBS_KEY not in r]
    if missing:
        raise ValueError(f"step samples {missing[:10]} carry no {OBS_KEY!r} (the final observation of the "
                         "hindsight block): they come from an older bipace_env agent loop; roll out again")
    actions = None
    if s.include_future_actions:
        missing = [i for i, r in enumerate(rows) if ACTION_KEY not in r]
        if missing:
            raise ValueError(f"include_future_actions: step samples {missing[:10]} carry no {ACTION_KEY!r} "
                             "(the projected action): they come from an older bipace_env agent loop; "
                             "roll out again or leave include_future_actions off")
        actions = [str(r[ACTION_KEY]) for r in rows]
    batch = step_batch(rows)
    texts = np.empty(len(rows), dtype=object)
    texts[:] = [str(r[OBS_KEY]) for r in rows]
    from estimators.returns import trajectory_outcome
    success, _ = trajectory_outcome(batch, s.success_threshold, None)
    ro = types.SimpleNamespace(batch=batch.with_fields(anchor=texts), prompt_ids=prompts, actions=actions)
    return augmented_prompts(ro, tok, s, success)


def per_rank_multiple(config) -> int:
    """Samples per data-parallel rank must fill whole log-prob micro-batches (verl's
    ``prepare_micro_batches``), unless the actor uses dynamic batch sizes."""
    rollout = config.actor_rollout_ref.rollout
    micro = rollout.get("log_prob_micro_batch_size_per_gpu", None)
    return 1 if rollout.get("log_prob_use_dynamic_bsz", False) or not micro else int(micro)


def actor_hindsight_sums(actor_wg, batch, rows: list[dict], padding: np.ndarray, tok,
                         s: HindsightSettings, per_rank: int = 1) -> tuple[np.ndarray, dict]:
    """(hind_logp_sum per sample of ``batch`` (a KVBatchMeta), NaN where not scored, stats): the actor's
    teacher-forced log-probs of each scored sample's response under its augmented prompt, summed.
    ``per_rank``: the samples a data-parallel rank gets are filled up to a multiple of it
    (``per_rank_multiple``)."""
    t0 = time.perf_counter()
    out = np.full(len(rows), np.nan)
    real = np.flatnonzero(~padding)
    data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                           select_fields=["prompts", "responses"])
    prompts, responses = _per_row(data["prompts"]), _per_row(data["responses"])
    augmented, truncated = hindsight_prompts([rows[i] for i in real], [prompts[i] for i in real], tok, s)
    scored = [int(real[j]) for j in sorted(augmented)]
    x_tilde = {int(real[j]): p for j, p in augmented.items()}
    empty = [i for i in scored if len(responses[i]) == 0]
    out[empty] = 0.0                                # no token to score: the sum over no token
    scored = [i for i in scored if len(responses[i]) > 0]
    stats = {"bipace/hindsight_rows": len(scored) + len(empty), "bipace/hindsight_truncated": truncated,
             "bipace/hindsight_tokens": 0}
    if scored:
        # verl's dispatch cuts the batch into one equal chunk per data-parallel rank, and a rank's chunk into
        # whole micro-batches: fill up with copies of the first scored sample (their sums are not read)
        ranks = actor_wg._dispatch_info.get("actor") or actor_wg._query_dispatch_info("actor")
        fill = scored + [scored[0]] * (-len(scored) % ((max(ranks) + 1) * per_rank))
        samples, tags = [], []
        for i in fill:
            p, r = x_tilde[i].long(), responses[i].long()
            ids = torch.cat([p, r])
            samples.append({"prompts": p, "responses": r, "response_mask": torch.ones_like(r),
                            "loss_mask": torch.ones_like(r), "input_ids": ids,
                            "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(len(ids))})
            tags.append({"prompt_len": len(p), "response_len": len(r), "seq_len": len(ids)})
        keys = [f"hindsight_{uuid4().hex}" for _ in fill]
        meta = tq.kv_batch_put(keys=keys, partition_id=PARTITION, fields=list_of_dict_to_tensordict(samples),
                               tags=tags)
        try:
            meta.extra_info = {"calculate_entropy": False, "compute_loss": False,
                               "temperature": s.temperature}
            actor_wg.compute_log_prob(meta)
            got = tq.kv_batch_get(keys=keys, partition_id=PARTITION, select_fields=["log_probs"])
        finally:
            tq.kv_clear(keys=keys, partition_id=PARTITION)
        # per sample over prompt + response, shifted left by one (verl's response_from_nested): the response
        # tokens' log-probs are the r positions before the last
        for i, lp, tag in zip(scored, _per_row(got["log_probs"]), tags):
            r = tag["response_len"]
            out[i] = float(lp[tag["seq_len"] - r - 1:tag["seq_len"] - 1].double().sum())
        stats["bipace/hindsight_tokens"] = int(sum(t["seq_len"] for t in tags[:len(scored)]))
    if s.save_dir:
        save_scored(s.save_dir, x_tilde, responses, out)
    stats["bipace/hindsight_s"] = time.perf_counter() - t0
    return out, stats
