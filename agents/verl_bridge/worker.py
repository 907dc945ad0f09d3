"""BiGPO's hidden state recorded in verl's old-log-prob forward and returned as ``bipace_embedding``.

verl 0.9.1's V1 trainer computes the old log-probs with ``ActorRolloutRefWorker.compute_log_prob``
(``verl/workers/engine_workers.py``) -> ``TrainingWorker.infer_batch`` -> the engine's ``infer_batch``
-> ``forward_backward_batch``, which cuts the batch into micro-batches (fixed size or dynamic bsz)
and calls ``forward_step(micro_batch, loss_function, forward_only=True)`` on each. ``forward_step``
returns ``(loss, {"model_output": {...}, ...})``; verl's ``postprocess_batch_func`` concatenates every
``model_output`` key over the micro-batches and undoes the dynamic-bsz reordering, and the worker's
TransferQueue bridge stores each key as a per-sample field. So one more key in ``model_output`` is all it
takes: ``EngineEmbeddingTap`` wraps the engine instance's ``forward_step`` (set on the instance at model
build time, no verl code copied) to run the step inside ``HiddenStateTap.capture`` and add the
captured (micro_batch, d) float32 states under ``bipace_embedding``; the ``bipace_sync`` advantage step
reads that field into ``StepBatch.embedding``.

Positions per micro-batch: verl's V1 samples are unpadded (``input_ids`` is a jagged nested tensor of
prompt + response, ``prompts`` holds each sample's prompt), so the last prompt token of sample i is at
``prompt_len_i - 1`` of its sequence: in the packed (1, total) input of ``use_remove_padding`` at
``offsets[i] + prompt_len_i - 1``, in the right-padded (B, max_len) input otherwise at column
``prompt_len_i - 1``. Ulysses sequence parallelism slices the packed sequence over the sp group; the tap
keeps this rank's positions and sums over the group (``HiddenStateTap.capture(shard=...)``).

``BipaceActorRolloutRefWorker`` is verl's worker with the tap installed after ``init_model`` and turned
on only inside ``compute_log_prob`` of the actor (not when the same call serves as the reference
policy of a LoRA run, ``no_lora_adapter``, whose base-model states are not the policy's). The trainer
(``agents.verl_bridge.trainer``) puts it in place of verl's worker and writes its options to
``actor_rollout_ref.bipace_hidden`` only when the estimator needs ``embedding``.
"""
from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch
from verl.single_controller.base.decorator import Dispatch, make_nd_compute_dataproto_dispatch_fn, register
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker

from agents.verl_bridge.hidden import HiddenStateTap, packed_last_prompt_positions
from agents.verl_bridge.steps import EMBEDDING_KEY

HIDDEN_CONFIG_KEY = "bipace_hidden"    # actor_rollout_ref.bipace_hidden = {layer: int | None}


def sequence_lengths(t: torch.Tensor) -> torch.Tensor:
    """Per-sample lengths of a batch field: a jagged nested tensor, or a dense one when every sample of
    the batch has the same length (verl's ``list_of_dict_to_tensordict`` stacks those)."""
    if t.is_nested:
        return t.offsets().diff().long().cpu()
    return torch.full((t.shape[0],), t.shape[1], dtype=torch.long)


def micro_batch_positions(micro_batch, use_remove_padding: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, columns) of each sample's last prompt token in the input the engine gives the model."""
    input_ids = micro_batch["input_ids"]
    if not input_ids.is_nested:
        raise ValueError("expected verl's padding-free samples (nested input_ids, pad_mode no_padding)")
    seq_lens = sequence_lengths(input_ids)
    if "prompts" in micro_batch.keys():
        prompt_lens = sequence_lengths(micro_batch["prompts"])
    else:       # what verl's own output slicing would infer: the sequence minus its response
        prompt_lens = seq_lens - sequence_lengths(micro_batch["responses"])
    if use_remove_padding:
        cu = torch.cat([torch.zeros(1, dtype=torch.long), seq_lens.cumsum(0)])
        return packed_last_prompt_positions(cu, prompt_lens)
    if (prompt_lens < 1).any() or (prompt_lens > seq_lens).any():
        raise ValueError("every prompt must have between 1 token and its whole sequence's length")
    return torch.arange(len(prompt_lens)), prompt_lens - 1


class EngineEmbeddingTap:
    """``HiddenStateTap`` on a verl engine's module, fed by its ``forward_step`` (see module docstring).

    Idle (one ``is None`` test per block call) unless inside ``recording()``; even then training
    steps (``forward_only=False``) pass through untouched."""

    def __init__(self, engine, layer: int | None = None):
        from verl.workers.engine.fsdp.transformer_impl import FSDPEngine
        if not isinstance(engine, FSDPEngine):    # other backends build model_output elsewhere
            raise ValueError("bigpo/bipace under verl record hidden states in the FSDP engine's "
                             f"forward_step; the actor runs {type(engine).__name__}: set "
                             "actor_rollout_ref.actor.strategy=fsdp or fsdp2")
        self.engine = engine
        self.tap = HiddenStateTap(engine.module, layer)
        self.layer = self.tap.layer
        self.active = False
        self._forward_step = engine.forward_step          # the bound method of verl's engine class
        engine.forward_step = self.forward_step

    def remove(self) -> None:
        self.tap.remove()
        self.engine.forward_step = self._forward_step

    @contextmanager
    def recording(self):
        self.active = True
        try:
            yield self
        finally:
            self.active = False

    def _shard(self):
        if not getattr(self.engine, "use_ulysses_sp", False):
            return None
        group = self.engine.ulysses_parallel_group
        return torch.distributed.get_rank(group=group), group

    def forward_step(self, micro_batch, loss_function, forward_only):
        if not (self.active and forward_only):
            return self._forward_step(micro_batch, loss_function=loss_function, forward_only=forward_only)
        use_rmpad = tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding", default=True)
        positions = micro_batch_positions(micro_batch, bool(use_rmpad))
        with self.tap.capture(positions, shard=self._shard()):
            loss, output = self._forward_step(micro_batch, loss_function=loss_function, forward_only=True)
            emb = self.tap.value
        model_output = output["model_output"]
        like = next((v for v in model_output.values() if isinstance(v, torch.Tensor)), None)
        # beside verl's own outputs (same device), so its post-processing treats them alike
        model_output[EMBEDDING_KEY] = emb if like is None else emb.to(like.device)
        return loss, output


class BipaceActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's actor/rollout/ref worker; the actor's ``compute_log_prob`` also returns ``bipace_embedding``
    when ``actor_rollout_ref.bipace_hidden`` is set (the trainer sets it for estimators that need it)."""

    bipace_tap: EngineEmbeddingTap | None = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        super().init_model()
        self.install_embedding_tap()

    def install_embedding_tap(self) -> None:
        opts = self.config.get(HIDDEN_CONFIG_KEY, None)
        if opts is not None and self.actor is not None:
            layer = opts.get("layer", None)
            self.bipace_tap = EngineEmbeddingTap(self.actor.engine, int(layer) if layer else None)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def compute_log_prob(self, data):
        # the same call computes a LoRA run's reference log-probs (adapter off): not the policy's states
        record = self.bipace_tap is not None and not tu.get(data, key="no_lora_adapter", default=False)
        with self.bipace_tap.recording() if record else nullcontext():
            return super().compute_log_prob(data)
