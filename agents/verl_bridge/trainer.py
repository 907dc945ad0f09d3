"""Our estimators in verl's advantage step: the trainer that ``agents.verl_bridge.main`` runs.

    python -m agents.verl_bridge.main algorithm.adv_estimator=bipace ...     # trainer.v1.trainer_mode=sync

``BipacePPOTrainer`` is verl 0.9.1's synchronous V1 trainer (``PPOTrainerSync``) with one method
overridden, ``_compute_advantage``: for a name of ``estimators.REGISTRY`` (every one of ours,
``algorithm.adv_estimator=<name>``) it reads the step samples' ``extra_fields`` (and, for the
estimators that need them, ``old_log_probs`` / ``bipace_embedding``) from the TransferQueue, runs
``steps.compute_data_advantages`` and writes ``advantages`` / ``returns`` back; any other name goes to
verl's own code. Why the override and not ``register_adv_est``: verl calls a registered estimator with
token rewards, the response mask and the uid only (the step fields never reach it, verl PR #7473),
and special-cases ``grpo`` before the registry. ``grpo`` and ``rloo`` therefore mean ours (verl-agent's
GRPO on step rows) under this trainer; verl's own entry point (``python -m verl.trainer.main_ppo``)
keeps verl's. Our other names are also registered in verl's registry, to a function that says which
entry point they need.

How it is chosen: verl's mode stays ``sync`` (``trainer.v1.trainer_mode``); in the task runner's Ray
process ``sync_mode_trains_with_bipace`` maps that mode to this class (see there for why no new mode).

BiGPO's hidden state (``bigpo``, ``bipace``: the estimators whose ``needs`` hold ``embedding``): the
trainer swaps verl's actor worker for ``worker.BipaceActorRolloutRefWorker`` and writes
``actor_rollout_ref.bipace_hidden`` before the workers are built (``_init_resource_pool_mgr``), so
the old-log-prob forward also returns ``bipace_embedding`` (see ``worker``); other estimators keep
verl's worker untouched. The layer: ``bipace.hidden_layer`` (an HF ``hidden_states`` index; null or 0:
BiPACE's layer -12 of 28, at the same depth for other models, as ``bipace-train``'s ``hidden_layer``).

HCAPO's and RELACE's hindsight sums (the estimators whose ``needs`` hold ``hind_logp_sum``): the advantage
step first runs the scoring pass with the actor worker group (``hindsight.actor_hindsight_sums``, options
``+bipace.hindsight={...}``) and logs ``bipace/hindsight_rows``, ``_tokens``, ``_truncated``, ``_s``.

Options of our estimators: ``+bipace.estimator_options={gamma: 0.95, eps: 0.05}`` (any keyword of
``estimators.compute_advantages``). Not supported with our estimators (a clear error): KL in the reward
(``algorithm.use_kl_in_reward``) and decoupled rollout correction, which verl computes in the same step;
nor, for the hidden-state estimators, ``rollout_correction.bypass_mode`` (no old-log-prob forward runs).
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf, open_dict
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1 import trainer_base
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from agents.hindsight import HIND_KEY
from agents.verl_bridge.hindsight import actor_hindsight_sums, hindsight_settings, per_rank_multiple
from agents.verl_bridge.steps import EMBEDDING_KEY, compute_data_advantages
from agents.verl_bridge.worker import HIDDEN_CONFIG_KEY, BipaceActorRolloutRefWorker
from estimators import REGISTRY


def estimator_options(config) -> dict:
    """``bipace.estimator_options`` of the run config (top level: verl checks ``algorithm`` against its
    own dataclass)."""
    opts = (config.get("bipace", None) or {}).get("estimator_options", None) or {}
    return dict(OmegaConf.to_container(opts, resolve=True) if OmegaConf.is_config(opts) else opts)


def needs_embedding(config) -> bool:
    name = config.algorithm.adv_estimator
    return name in REGISTRY and "embedding" in REGISTRY[name].needs


def hidden_layer(config) -> int | None:
    """``bipace.hidden_layer``; None (also for null or 0) means BiPACE's default depth."""
    layer = (config.get("bipace", None) or {}).get("hidden_layer", None)
    return int(layer) if layer else None


def check_algorithm(algorithm) -> None:
    """What verl does in its advantage step that ours does not: refuse it by name."""
    corr = algorithm.get("rollout_correction", None)
    name = algorithm.adv_estimator
    if (name in REGISTRY and "embedding" in REGISTRY[name].needs and corr
            and corr.get("bypass_mode", False)):
        raise ValueError(f"the estimator {name!r} reads the policy's hidden states, which the bipace "
                         "worker records in the old-log-prob forward; algorithm.rollout_correction."
                         "bypass_mode=True skips that forward: set it to false")
    if algorithm.get("use_kl_in_reward", False):
        raise ValueError(f"algorithm.use_kl_in_reward=True is not supported with the bipace estimator "
                         f"{algorithm.adv_estimator!r}; use the actor's KL loss (actor_rollout_ref.actor."
                         "use_kl_loss=True) instead")
    if corr and not corr.get("bypass_mode", False) and (corr.get("rollout_is") or corr.get("rollout_rs")):
        raise ValueError("decoupled rollout correction (algorithm.rollout_correction with rollout_is/"
                         "rollout_rs and bypass_mode=False) is not supported with the bipace estimators; "
                         "turn it off or use bypass_mode=True")


def batch_fields(estimator: str) -> list[str]:
    needs = REGISTRY[estimator].needs
    return (["response_mask", "extra_fields"] + (["old_log_probs"] if "old_logp_sum" in needs else [])
            + ([EMBEDDING_KEY] if "embedding" in needs else []))


class BipacePPOTrainer(PPOTrainerSync):
    """verl's sync V1 trainer; our estimators in ``_compute_advantage``, and for the hidden-state ones
    the recording actor worker (see the module docstring)."""

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        if not needs_embedding(self.config):
            return
        check_algorithm(self.config.algorithm)
        # the worker reads its options from the config it is built with (actor_rollout_ref)
        with open_dict(self.config.actor_rollout_ref):
            self.config.actor_rollout_ref[HIDDEN_CONFIG_KEY] = {"layer": hidden_layer(self.config)}
        for role in (Role.Actor, Role.ActorRollout, Role.ActorRolloutRef):   # the one holding the actor
            if role in self.role_worker_mapping:
                self.role_worker_mapping[role] = ray.remote(BipaceActorRolloutRefWorker)

    def _compute_advantage(self, batch, metrics: dict):
        name = self.config.algorithm.adv_estimator
        if name not in REGISTRY:
            return super()._compute_advantage(batch, metrics=metrics)
        check_algorithm(self.config.algorithm)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                               select_fields=batch_fields(name))
        response_mask = data["response_mask"]
        extra = data.pop("extra_fields").tolist()
        rows = np.empty(len(extra), dtype=object)
        rows[:] = extra
        # padding samples (verl copies the first sample to fill the dp size) carry its step fields: leave
        # them out of the estimator, give them 0
        padding = np.array([bool(t.get("is_padding", False)) for t in batch.tags], dtype=bool)
        proto = DataProto(batch=data.to_padded_tensor(), non_tensor_batch={"extra_fields": rows})
        opts = estimator_options(self.config)
        if "hind_logp_sum" in REGISTRY[name].needs:     # HCAPO/RELACE: the hindsight pass, by the actor
            sums, stats = actor_hindsight_sums(self.actor_rollout_wg, batch, extra, padding, self.tokenizer,
                                               hindsight_settings(self.config, opts),
                                               per_rank_multiple(self.config))
            proto.batch[HIND_KEY] = torch.as_tensor(sums, dtype=torch.float64)
            scored = np.isfinite(sums) & ~padding
            stats["bipace/hindsight_finite_rows"] = int(scored.sum())
            stats["bipace/hindsight_sum_mean"] = float(sums[scored].mean()) if scored.any() else 0.0
            metrics.update(stats)
        proto = compute_data_advantages(proto, name, padding=padding, **opts)
        out = TensorDict({k: response_to_nested(proto.batch[k], response_mask)
                          for k in ("advantages", "returns")}, batch_size=len(batch.keys))
        metrics["bipace/padding_samples"] = int(padding.sum())
        if EMBEDDING_KEY in proto.batch.keys():     # what the estimator saw: (real rows, hidden size)
            emb = proto.batch[EMBEDDING_KEY][torch.as_tensor(~padding)]
            metrics.update({"bipace/embedding_rows": int(emb.shape[0]),
                            "bipace/embedding_dim": int(emb.shape[1]),
                            "bipace/embedding_abs_mean": float(emb.abs().mean()) if emb.numel() else 0.0})
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=out)


@contextmanager
def sync_mode_trains_with_bipace():
    """Inside, verl's trainer mode ``sync`` resolves to ``BipacePPOTrainer`` (in this process only).

    Not a mode of its own: verl's ``PPOTrainer`` compares ``trainer_mode == "sync"`` literally (replay
    buffer, refill, checkpoints, prompt persistence in ``trainer_base.py``), so any other name would turn
    on its async paths. ``agents.verl_bridge.main.BipaceTaskRunner.run`` enters this in the task runner's
    own Ray process, the one where verl's ``TaskRunnerV1.run`` calls ``get_trainer_cls``."""
    registry = trainer_base.TRAINER_REGISTRY
    verls = registry.get("sync")
    registry["sync"] = BipacePPOTrainer
    try:
        yield BipacePPOTrainer
    finally:
        registry["sync"] = verls


def _needs_bipace_trainer(*args, **kwargs):
    raise ValueError("this advantage estimator is a bipace one: it reads per-step fields that verl's "
                     "registry does not pass; launch with `python -m agents.verl_bridge.main` (same config "
                     "as verl's main_ppo, trainer.v1.trainer_mode=sync), not "
                     "`python -m verl.trainer.main_ppo`")


for _name in REGISTRY:     # a clear message instead of verl's 'unknown estimator' under the plain trainer
    if _name not in core_algos.ADV_ESTIMATOR_REGISTRY and _name not in ("grpo", "rloo"):
        core_algos.register_adv_est(_name)(_needs_bipace_trainer)
