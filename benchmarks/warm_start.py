"""The warm start every table and the credit benchmark start from: LoRA SFT of the preset's model on the
env's expert steps, merged into a ready-to-load model folder.

    from benchmarks.warm_start import build_warm_start
    seconds = build_warm_start(get_preset("textcraft-table"), Path("runs/table/warm_start"))

Shared by ``benchmarks.learning`` (TextCraft and env tables), ``benchmarks.credit`` (the advantage
accuracy's default policy) and ``benchmarks.speed.sft_cost`` (what one of its SFT steps costs), so that
none of the three imports another's scripts.
"""
from __future__ import annotations

import time
from pathlib import Path

from agents.config import PROMPT_FIELDS

# TrainConfig fields every evaluation and the warm start take from the table's config; the rest stay at
# TrainConfig's defaults there (the warm start adapts every block whatever RL's lora_layers)
COMMON = ("env", "env_kwargs", "eval_env_kwargs", "train_split", "eval_split", "max_steps", *PROMPT_FIELDS,
          "max_new_tokens", "threads", "lora_rank", "lora_alpha", "eval_tasks", "eval_batch",
          "eval_temperature", "eval_repeats")
SFT_FIELDS = ("sft_steps", "sft_lr", "sft_batch", "sft_episodes", "sft_passes", "sft_explore", "sft_rename",
              "sft_probe", "sft_mode", "sft_checkpoint_every",
              "gradient_checkpointing")   # halves a warm start's peak memory (benchmarks/speed/sft_cost.py)


def common_settings(cfg) -> dict:
    return {k: getattr(cfg, k) for k in COMMON} | {"progress": False}


def warm_start_config(cfg, out_dir: Path, seed: int = 0):
    """The config a table's warm start runs with: the table's prompts, env and ``sft_*`` fields; the rest
    (LoRA on every block among them) ``TrainConfig``'s defaults."""
    from agents.config import TrainConfig
    return TrainConfig(model=cfg.model, seed=seed, out_dir=str(out_dir), **common_settings(cfg),
                       **{k: getattr(cfg, k) for k in SFT_FIELDS})


def build_warm_start(cfg, warm: Path, seed: int = 0) -> float:
    """The table's warm start: LoRA SFT of ``cfg.model`` on expert steps of the config's training split
    (its ``sft_*`` fields, LoRA on every block), merged and saved in ``warm``; returns its seconds. Any
    env: the learning tables build theirs with it, the credit benchmark its default policy."""
    from agents.envs import get_env_spec, split_env_factory
    from agents.sft import run_sft
    t0, spec = time.perf_counter(), get_env_spec(cfg.env)
    scfg = warm_start_config(cfg, warm.parent, seed)
    steps = cfg.max_steps or spec.max_steps
    make_env = split_env_factory(spec, cfg.env_kwargs_dict(), cfg.train_split, steps)
    make_eval_env = split_env_factory(spec, cfg.env_kwargs_dict(held_out=True), cfg.eval_split, steps)
    tasks = spec.split_tasks(make_env, cfg.train_split)
    held_out = spec.split_tasks(make_eval_env, cfg.eval_split)
    run_sft(scfg, spec, make_env, tasks, warm,
            cfg.prompt_settings(),
            held_out=held_out, make_eval_env=make_eval_env)
    return time.perf_counter() - t0
