"""Loading a finished run: its settings, and its policy after training or after any saved iteration.

    from agents.runs import load_run_config, load_run_policy
    cfg = load_run_config("runs/table/grpo_seed0")       # the TrainConfig it ran with (preset, every field)
    model, tok = load_run_policy("runs/table/grpo_seed0")                # base policy + final LoRA adapter
    model, tok = load_run_policy("runs/table/grpo_seed0", iteration=5)   # as it was after iteration 5

A run folder is what ``agents.trainer.Trainer`` writes (``bipace-train``, ``bipace-compare``,
``benchmarks.learning.train_table``): ``config.json``, ``adapter/`` and, per checkpoint,
``checkpoints/iter_N/adapter``.
Errors name what is missing and what to pass instead.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

LORA_FIELDS = ("lora_rank", "lora_alpha", "lora_mlp", "lora_layers")


def load_run_config(run: str | Path):
    """The ``TrainConfig`` a run was made with (fields added since then take their defaults)."""
    from agents.config import TrainConfig
    path = Path(run) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; pass the folder of a run made by the trainer")
    stored = json.loads(path.read_text())
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in stored.items() if k in known})


def run_policy(run: str | Path) -> tuple[str, dict]:
    """A finished run's base policy and LoRA shape (from its ``config.json``), so its ``adapter/`` loads
    onto the same modules."""
    run = Path(run)
    need = [run / "config.json", run / "adapter" / "adapter_model.safetensors"]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        raise FileNotFoundError(f"{run}: missing {', '.join(missing)}; pass the folder of a finished RL "
                                "run (e.g. a train_table run such as runs/table/grpo_seed0)")
    cfg = json.loads(need[0].read_text())
    return cfg["model"], {k: cfg[k] for k in LORA_FIELDS if k in cfg}


def checkpoint_adapter(run: str | Path, iteration: int) -> Path:
    """The adapter folder ``run`` saved after ``iteration``; FileNotFoundError naming the saved ones."""
    run = Path(run)
    folder = run / "checkpoints" / f"iter_{iteration:06d}" / "adapter"
    if not (folder / "adapter_model.safetensors").exists():
        saved = sorted(int(p.name[5:]) for p in (run / "checkpoints").glob("iter_*"))
        raise FileNotFoundError(f"{run} saved no adapter after iteration {iteration} (saved after: "
                                f"{saved or 'none'}); pick one of those, or 0 for the policy before the "
                                "first update")
    return folder


def load_run_adapter(model, run: str | Path, adapter: Path | None = None) -> None:
    """Puts a run's trained LoRA weights (its final ``adapter/``, or ``adapter``) into ``model``, a peft
    model of the same LoRA shape; ValueError when the shapes differ."""
    from agents.models import load_adapter_weights
    result = load_adapter_weights(model, adapter or Path(run) / "adapter")
    if getattr(result, "unexpected_keys", None):
        raise ValueError(f"{run}: its adapter has weights this model lacks ({result.unexpected_keys[:3]} "
                         "...); was it trained on another base policy?")


def load_run_policy(run: str | Path, iteration: int | None = None, dtype: str = "float32",
                    device: str = "cpu"):
    """``(model, tokenizer)``: a run's base policy with its LoRA adapter, final or after ``iteration``
    (0 = before the first update: the fresh adapter adds nothing)."""
    from agents.models import LoraSettings, add_lora, load_policy
    base, lora = run_policy(run)
    model, tok = load_policy(base, dtype, device)
    shape = LoraSettings(rank=lora.get("lora_rank", 64), alpha=lora.get("lora_alpha", 64),
                         mlp=lora.get("lora_mlp", False), top_layers=lora.get("lora_layers", 0))
    model = add_lora(model, shape)
    if iteration != 0:
        load_run_adapter(model, run, checkpoint_adapter(run, iteration) if iteration else None)
    return model, tok
