"""Single-device PPO trainer for LoRA agents with any registered advantage estimator.

    from agents.config import TrainConfig
    from agents.trainer import Trainer
    summary = Trainer(TrainConfig(env="textcraft", estimator="bipace", model="tiny")).train()

One iteration: sample B tasks (uniformly, or favouring those with mixed outcomes: ``agents.task_sampling``),
roll out G episodes each (``agents.rollout``), map rewards, compute
advantages with ``estimators.compute_advantages(batch, estimator, ...)``, broadcast them to tokens, and
take PPO-clip steps (dual clip, token-mean over each mini-batch, micro-batched with gradient
accumulation) with an entropy bonus and low-variance KL to the reference policy, which is the same
model with the LoRA adapter disabled (no second copy in memory). Checkpoints hold the adapter (peft
format), optimizer, RNG states, iteration and the logs' sizes; ``resume=True`` continues from the newest
readable one, with the same settings (``agents.checkpoints``). The run holds a lock on ``out_dir``
(``agents.run_folder``) and stops at the first NaN or inf in the advantages, loss or gradient norm
(``agents.finite``). Logs: ``train.csv``/``eval.csv``/``eval_by_task.jsonl`` and TensorBoard under
``out_dir`` (``agents.train_log``). Loss options (``agents.ppo``):
GSPO's sequence ratio, DAPO's clip-higher, seq-mean aggregation; DAPO's dynamic sampling in
``agents.dynamic_sampling``.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from agents.config import TrainConfig
from estimators import broadcast_to_tokens
from agents.envs import get_env_spec, split_env_factory
from agents.checkpoints import check_resume_settings, load_checkpoint, replace_text, save_checkpoint
from agents.crash_points import crash_point
from agents.finite import check_advantages, check_step
from agents.models import LoraSettings, add_lora, load_policy
from agents.dynamic_sampling import dynamic_sample
from agents.evaluation import chunk_width, evaluate_tasks
from agents.gpu_memory import PhaseMemory, prefer_expandable_segments
from agents.ppo import agg_loss, check_loss_options, ppo_terms, response_logprobs, row_logp_sums
from agents.prompts import make_prompter
from agents.rollout import RolloutCollector
from agents.row_order import (by_episode, micro_batch_order, prefix_codes, prefix_groups, shares_prefix,
                              shuffled_rows)
from agents.task_sampling import TASK_SAMPLERS, TaskTally, pick_tasks
from agents.run_folder import claim_run_folder
from agents.train_log import RunRecord, mixed_group_share


class Trainer:
    """``make_env``/``train_tasks``/``eval_tasks``/``model``+``tokenizer`` may be injected (tests, custom
    envs); by default they come from ``agents.envs`` and ``agents.models``. ``own_folder`` (bipace-train):
    refuse an ``out_dir`` that holds anything unless ``cfg.resume`` or ``cfg.overwrite``; without it the
    folder keeps what it holds (benchmarks put a warm start there first). Either way the trainer holds
    the folder's lock until ``close()``."""

    def __init__(self, cfg: TrainConfig, make_env=None, train_tasks=None, eval_tasks=None,
                 model=None, tokenizer=None, own_folder: bool = False):
        self.cfg = cfg
        self.out = Path(cfg.out_dir)   # created once the arguments are checked (no stray runs/run)
        if cfg.threads > 0:
            torch.set_num_threads(cfg.threads)
        self.spec = get_env_spec(cfg.env)
        self.max_steps = cfg.max_steps or self.spec.max_steps
        if make_env is not None:
            self.make_env = self.make_eval_env = make_env
        else:
            self.make_env = self._env_factory(cfg.env_kwargs_dict(), cfg.train_split)
            self.make_eval_env = self._env_factory(cfg.env_kwargs_dict(held_out=True), cfg.eval_split)
        if train_tasks is None:
            train_tasks = self.spec.split_tasks(self.make_env, cfg.train_split)
        if eval_tasks is None:
            eval_tasks = self.spec.split_tasks(self.make_eval_env, cfg.eval_split)
        self.train_tasks, self.eval_tasks = list(train_tasks), list(eval_tasks)
        if not self.train_tasks:
            raise ValueError(f"no training tasks in split {cfg.train_split!r} of {cfg.env}")
        if cfg.task_sampling not in TASK_SAMPLERS:
            raise ValueError(f"task_sampling must be one of {' | '.join(TASK_SAMPLERS)}, got "
                             f"{cfg.task_sampling!r}")
        self.task_tally = TaskTally(len(self.train_tasks))     # episodes won per training task, this run
        from estimators import available_estimators, resolve_options
        if cfg.estimator not in available_estimators():
            raise ValueError(f"unknown estimator {cfg.estimator!r}; available: {available_estimators()}")
        # None -> the estimator's own default; a bad option fails here, before any rollout
        self.mode = resolve_options(cfg.estimator, mode=cfg.mode, **cfg.estimator_options_dict()).mode
        check_loss_options(cfg.ratio_level, cfg.loss_agg, *cfg.clip_range())
        cfg.episode_minibatches()      # raises on an unknown --minibatch-unit
        print(f"{cfg.estimator}: advantage normalisation {self.mode}"
              + (" (the estimator's default)" if cfg.mode is None else " (--mode)"))
        self.prompt_settings = cfg.prompt_settings()
        self.folder_lock = claim_run_folder(self.out, resume=cfg.resume or not (own_folder or cfg.overwrite),
                                            overwrite=cfg.overwrite, what="training run")
        try:
            self._set_up(model, tokenizer)
        except BaseException:
            self.folder_lock.release()
            raise

    def _set_up(self, model, tokenizer) -> None:
        """The work after the folder is locked: settings check, warm start, policy, optimizer, checkpoint."""
        cfg = self.cfg
        if cfg.resume:
            check_resume_settings(self.out, cfg)     # before the warm start: a changed setting is named
        # written first, so a run killed in its warm start can be resumed
        replace_text(self.out / "config.json", json.dumps(asdict(cfg), indent=1))
        prefer_expandable_segments()
        if model is None:
            base = self._warm_start_path() if cfg.sft_steps > 0 else cfg.model
            model, tokenizer = load_policy(base, cfg.dtype, cfg.device, cfg.gradient_checkpointing)
        self.tok = tokenizer
        torch.manual_seed(cfg.seed)     # LoRA init: same seed, same adapter
        self.model = add_lora(model, LoraSettings(rank=cfg.lora_rank, alpha=cfg.lora_alpha, mlp=cfg.lora_mlp,
                                                  top_layers=cfg.lora_layers))
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.resolved_lr(), weight_decay=cfg.weight_decay)
        self.memory = PhaseMemory(next(self.model.parameters()).device)   # per-phase peaks on CUDA
        self._collectors: dict[str, RolloutCollector] = {}
        self.eval_by_task: dict[str, list] = {}      # the last evaluation's [won, episodes] per goal
        self.eval_episodes: dict = {}                # ... and its episodes in order (tasks, won, scores)
        self.run_record, self.current_iteration = RunRecord(), 0     # eval_before, seconds per process
        self.start_iteration = self.load_checkpoint() + 1 if cfg.resume else 1

    def _env_factory(self, kwargs: dict, split: str):
        return split_env_factory(self.spec, kwargs, split, self.max_steps)

    # ------------------------------------------------------------------ warm start
    def _warm_start_path(self) -> str:
        path = self.out / "warm_start"
        if not (path / "config.json").exists():
            from agents.sft import run_sft
            run_sft(self.cfg, self.spec, self.make_env, self.train_tasks, path, self.prompt_settings,
                    held_out=self.eval_tasks, make_eval_env=self.make_eval_env)
        return str(path)

    # ------------------------------------------------------------------ rollouts
    def collector(self, kind: str) -> RolloutCollector:
        if kind not in self._collectors:
            c = self.cfg
            train = kind == "train"
            rs = c.rollout_settings(self.max_steps, train)
            n_eval = min(c.eval_tasks or len(self.eval_tasks), len(self.eval_tasks))
            n = c.batch_tasks * c.group_size if train else chunk_width(n_eval * c.eval_repeats, c.eval_batch)
            self._collectors[kind] = RolloutCollector(
                self.model, self.tok, self._rollout_env_factory() if train else self.make_eval_env, n,
                make_prompter(c.env, self.prompt_settings), rs,
                self.spec.reward_map, vector_mode=c.vector_mode, fallback_chars=self.spec.fallback_chars,
                vector_kwargs=self._ray_kwargs() if c.vector_mode == "ray" else None)
        return self._collectors[kind]

    def _ray_kwargs(self) -> dict:
        """RayVectorEnv options: rollout and evaluation envs live together, so each reserves half the CPUs."""
        c = self.cfg
        return dict(address=c.ray_address or None, num_workers=c.ray_workers or None, cpu_share=0.5)

    def _rollout_env_factory(self):
        """Training rollouts' env maker: with ``rl_rename`` a share of episodes plays in a renamed world
        (``agents.augment``). SFT and evaluation always use the plain env."""
        if self.cfg.rl_rename <= 0:
            return self.make_env
        from agents.augment import renamed_env_factory
        return renamed_env_factory(self.make_env, self.cfg.env, self.cfg.rl_rename,
                                   exclude=[str(t) for t in self.eval_tasks])

    def rollout(self, it: int, refill: int = 0):
        """One rollout batch of iteration ``it``; ``refill`` > 0 numbers dynamic sampling's extra batches
        (other tasks, seeds and group ids; refill 0 is the iteration's usual batch)."""
        c = self.cfg
        rng = np.random.default_rng([c.seed, it] + ([refill] if refill else []))
        torch.manual_seed(c.seed * 1_000_003 + it + 7919 * refill)     # decoding is reproducible per batch
        pick = pick_tasks(c.task_sampling, rng, self.task_tally, c.batch_tasks)
        tasks = [self.train_tasks[k] for k in np.repeat(pick, c.group_size)]
        seeds = np.repeat(rng.integers(0, 2**31 - 1, c.batch_tasks), c.group_size)
        first_group = it * c.batch_tasks + refill * 1_000_000_007
        groups = np.repeat(first_group + np.arange(c.batch_tasks), c.group_size)
        self.model.eval()
        ro = self.collector("train").collect(tasks, seeds, groups)
        self.task_tally.add(np.repeat(pick, c.group_size), ro.success)
        return ro, rng

    def evaluate(self, chunks_file: Path | None = None) -> dict:
        """Metrics on the first ``eval_tasks`` held-out tasks, each played ``eval_repeats`` times with
        fixed env and decoding seeds (``agents.evaluation.evaluate_tasks``; ``chunks_file`` keeps finished
        chunks, so an evaluation longer than a session is finished in the next). Leaves the per-goal wins in
        ``eval_by_task`` and the episodes in ``eval_episodes``."""
        c = self.cfg
        tasks = self.eval_tasks[:c.eval_tasks] if c.eval_tasks else self.eval_tasks
        self.model.eval()
        result = evaluate_tasks(self.collector("eval"), tasks, c.eval_repeats, chunks_file)
        self.eval_by_task, self.eval_episodes = result.by_task, result.episodes
        return result.metrics

    # ------------------------------------------------------------------ update
    def advantages(self, ro) -> np.ndarray:
        from estimators import REGISTRY, compute_advantages
        c = self.cfg
        batch = ro.batch
        if "old_logp_sum" in REGISTRY[c.estimator].needs:      # GACA: the rollout policy's per-row log-probs
            batch = batch.with_fields(**row_logp_sums(ro.response_ids, self._old_logprobs(ro)))
        self.hindsight_stats = {}
        if "hind_logp_sum" in REGISTRY[c.estimator].needs:     # HCAPO/RELACE: the hindsight scoring pass
            from agents.hindsight import score_hindsight, settings_for
            sums, self.hindsight_stats = score_hindsight(self.model, self.tok, ro, settings_for(c))
            batch = batch.with_fields(hind_logp_sum=sums)
        options = c.estimator_kwargs(self.mode)
        adv = compute_advantages(batch, c.estimator, **options)
        check_advantages(adv, batch, c.estimator, options)      # a NaN stops the run before the update
        return adv

    @torch.no_grad()
    def _old_logprobs(self, ro) -> list:
        """Behaviour-policy log-probs of every row, taken before any update of this iteration."""
        if self.cfg.old_logprobs == "generate":
            return ro.old_logprobs
        if self.cfg.old_logprobs != "recompute":
            raise ValueError(f"old_logprobs must be generate | recompute, got {self.cfg.old_logprobs!r}")
        return self._row_logprobs(ro, np.arange(len(ro.response_ids)))

    @torch.no_grad()
    def _row_logprobs(self, ro, rows: np.ndarray) -> list:
        """Per-token log-probs of the responses of ``rows`` under the current policy, one CPU tensor each."""
        self.model.eval()
        out, step = [], self.cfg.micro_batch_rows
        for s in range(0, len(rows), step):
            part = rows[s:s + step]
            keys, episodes = prefix_groups(self.cfg, ro, part, grad=False)
            lp, _, _ = response_logprobs(self.model, [ro.prompt_ids[r] for r in part],
                                         [ro.response_ids[r] for r in part], self.tok.pad_token_id,
                                         self.cfg.temperature, with_entropy=False, keys=keys,
                                         episodes=episodes, chunk_tokens=self.cfg.logits_chunk_tokens)
            out += [lp[k, :len(ro.response_ids[r])].cpu() for k, r in enumerate(part)]
        return out

    def update(self, ro, adv: np.ndarray, rng) -> dict:
        c = self.cfg
        lengths = np.array([len(r) for r in ro.response_ids])
        rows_all = np.flatnonzero(lengths > 0)      # a zero-length answer has no token to train
        if c.skip_zero_adv:
            rows_all = rows_all[adv[rows_all] != 0]
        if c.old_logprobs == "recompute":
            with self.memory.phase("old_logprobs"):
                old_all = self._old_logprobs(ro)
        else:
            old_all = self._old_logprobs(ro)
        with self.memory.phase("update"):
            sums, grad_norms = self._ppo_epochs(ro, adv, rng, rows_all, old_all)
        tokens_seen = float(lengths[rows_all].sum()) * c.ppo_epochs
        out = {k: v / max(tokens_seen, 1) for k, v in sums.items()}
        out["grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        if c.drift_rows > 0:
            out["drift"] = self._drift(ro, rows_all[:c.drift_rows], old_all)
        return out

    def _ppo_epochs(self, ro, adv: np.ndarray, rng, rows_all: np.ndarray, old_all: list) -> tuple[dict, list]:
        """PPO epochs over ``rows_all`` in mini-batches; returns the token-weighted sums of the loss terms
        and each optimizer step's gradient norm."""
        c = self.cfg
        dev = next(self.model.parameters()).device
        lengths = np.array([len(r) for r in ro.response_ids])
        whole_episodes = by_episode(c, ro)
        key_code = prefix_codes(ro) if shares_prefix(c, ro) else None
        mini = c.mini_batch_rows or max(1, len(rows_all))   # an empty update (all rows skipped) is fine
        sums = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clipfrac": 0.0}
        grad_norms = []
        self.model.train()
        for epoch in range(c.ppo_epochs):
            order = shuffled_rows(ro, rows_all, rng, whole_episodes)
            for s in range(0, len(order), mini):
                mb = order[s:s + mini]
                T, mb_loss = float(lengths[mb].sum()), 0.0
                self.optimizer.zero_grad(set_to_none=True)
                mb_sorted = micro_batch_order(ro, mb, lengths, key_code, whole_episodes)
                for m0 in range(0, len(mb), c.micro_batch_rows):
                    rows = mb_sorted[m0:m0 + c.micro_batch_rows]
                    old = [old_all[r] for r in rows]
                    p_ids = [ro.prompt_ids[r] for r in rows]
                    r_ids = [ro.response_ids[r] for r in rows]
                    row_keys, row_episodes = prefix_groups(c, ro, rows)
                    logp, ent, mask = response_logprobs(self.model, p_ids, r_ids, self.tok.pad_token_id,
                                                        c.temperature, keys=row_keys, episodes=row_episodes,
                                                        chunk_tokens=c.logits_chunk_tokens)
                    old_t = torch.zeros_like(logp)
                    for k, o in enumerate(old):
                        old_t[k, :len(o)] = o.to(dev)
                    adv_t = torch.as_tensor(broadcast_to_tokens(adv[rows], mask.cpu().numpy()),
                                            dtype=torch.float32, device=dev)
                    ref = None
                    if c.kl_coef > 0:
                        with torch.no_grad(), self.model.disable_adapter():
                            ref, _, _ = response_logprobs(self.model, p_ids, r_ids, self.tok.pad_token_id,
                                                          c.temperature, with_entropy=False, keys=row_keys,
                                                          episodes=row_episodes,
                                                          chunk_tokens=c.logits_chunk_tokens)
                    t = ppo_terms(logp, old_t, adv_t, mask, ref, *c.clip_range(), c.dual_clip, c.ratio_level)
                    pg = agg_loss(t["pg"], mask, c.loss_agg, T, len(mb))
                    ent = agg_loss(ent, mask, c.loss_agg, T, len(mb))
                    kl = agg_loss(t["kl"], mask, c.loss_agg, T, len(mb)) if t["kl"] is not None \
                        else torch.zeros((), device=dev)
                    loss = pg - c.entropy_coef * ent + c.kl_coef * kl
                    loss.backward()
                    mb_loss += loss.item()
                    sums["loss"] += loss.item() * T
                    sums["pg_loss"] += pg.item() * T
                    sums["kl"] += kl.item() * T
                    sums["entropy"] += ent.item() * T
                    sums["clipfrac"] += t["clipped"].float().sum().item()
                params = [p for p in self.model.parameters() if p.requires_grad]
                grad_norms.append(float(torch.nn.utils.clip_grad_norm_(params, c.grad_clip)))
                check_step(mb_loss, grad_norms[-1], f"iteration {self.current_iteration}, PPO epoch "
                           f"{epoch + 1}, rows {s + 1}-{s + len(mb)} of {len(order)}")   # weights stay finite
                self.optimizer.step()
                crash_point("update")
        return sums, grad_norms

    def _drift(self, ro, rows: np.ndarray, old_all: list) -> float:
        """Mean |log pi_new - log pi_old| per response token over ``rows`` after the update: how far
        one iteration moved the policy on the data it trained on (0 before any step)."""
        new = self._row_logprobs(ro, rows)
        tokens = sum(len(lp) for lp in new)
        total = sum(float((lp - old_all[r]).abs().sum()) for lp, r in zip(new, rows))
        return total / max(tokens, 1)

    def batch_metrics(self, ro, adv: np.ndarray) -> dict:
        """Extra per-iteration log values from the batch (a subclass hook, outside every timer; e.g.
        benchmarks/learning/compare.py adds its step-group statistics)."""
        return {}

    def iteration(self, it: int) -> dict:
        t0, self.current_iteration = time.perf_counter(), it
        with self.memory.phase("rollout"):
            ro, rng = self.rollout(it)
            first, sampling = ro, {}
            if self.cfg.dynamic_sampling:
                ro, sampling = dynamic_sample(first, lambda r: self.rollout(it, r)[0], self.cfg.batch_tasks,
                                              self.cfg.dynamic_sampling_rounds)
        crash_point("rollout")
        t1 = time.perf_counter()
        adv = self.advantages(ro)
        t2 = time.perf_counter()
        metrics = self.update(ro, adv, rng)
        b = ro.batch
        # success and episode statistics of the iteration's first batch: dynamic sampling's kept groups are
        # a biased sample of them
        metrics.update(iteration=it, success=float(first.success.mean()),
                       mixed_groups=mixed_group_share(first),
                       episode_return=float(first.episode_return.mean()),
                       episode_length=float(first.episode_length.mean()),
                       valid_rate=float(b.action_valid.mean()),
                       admissible_rate=float(first.admissible.mean()) if len(first.admissible) else 1.0,
                       rows=len(b.reward), adv_mean=float(adv.mean()), adv_std=float(adv.std()),
                       rollout_s=t1 - t0, estimator_s=t2 - t1, update_s=time.perf_counter() - t2,
                       gen_s=ro.gen_seconds,
                       env_s=ro.env_seconds)
        metrics.update(self.batch_metrics(ro, adv))
        metrics.update(self.hindsight_stats)      # the scoring pass's share of estimator_s (hcapo, relace)
        metrics.update(sampling)
        metrics.update(self.memory.take())
        if self.cfg.rl_rename > 0:      # the two kinds of episode measure different skills: log them apart
            for name, which in (("success_renamed", first.renamed), ("success_plain", ~first.renamed)):
                metrics[name] = float(first.success[which].mean()) if which.any() else float("nan")
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, it: int) -> Path:
        return save_checkpoint(self.out, it, self.model, self.optimizer, self.task_tally, self.cfg,
                               self.run_record.for_checkpoint(self.out))

    def load_checkpoint(self) -> int:
        """Restore the newest readable checkpoint of ``out_dir``; returns its iteration (0: none yet, so the
        run starts again at iteration 1, its warm start kept)."""
        state = load_checkpoint(self.out, self.model, self.optimizer, self.cfg.iterations)
        if state is None:
            return 0
        if "task_tally" in state:       # checkpoints older than task_sampling have none (uniform ignores it)
            self.task_tally = TaskTally(len(self.train_tasks), **state["task_tally"])
        self.run_record = RunRecord(state.get("record", {}))
        return int(state["iteration"])

    # ------------------------------------------------------------------ main loop
    def train(self) -> dict:
        """Evaluate, run the iterations with their logs and checkpoints, evaluate, save the adapter and
        ``summary.json`` (``agents.run_loop``); returns the summary."""
        from agents.run_loop import run_training
        return run_training(self)

    def close(self) -> None:
        """Stop the env workers (vectorised envs, Ray actors) this trainer started; give up the folder."""
        for col in self._collectors.values():
            col.close()
        self._collectors.clear()
        self.folder_lock.release()
