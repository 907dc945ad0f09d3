"""A training run's checkpoints: ``<out>/checkpoints/iter_NNNNNN/`` holds the LoRA adapter (peft format)
and ``state.pt`` (iteration, optimizer, RNG states, the task tally, the config); ``latest`` names the
newest. A checkpoint is written to a temporary folder and renamed, so a run stopped mid-write keeps the
previous one. ``Trainer(cfg with resume=True)`` continues from ``latest``.
"""
from __future__ import annotations

import random
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from agents.models import load_adapter_weights


def save_checkpoint(out: Path, it: int, model, optimizer, task_tally, cfg) -> Path:
    """Write iteration ``it``'s checkpoint under ``out/checkpoints`` and point ``latest`` at it."""
    ckdir = Path(out) / "checkpoints"
    final = ckdir / f"iter_{it:06d}"
    tmp = ckdir / f".tmp_iter_{it:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "adapter")
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save({"iteration": it, "optimizer": optimizer.state_dict(), "rng": rng,
                "task_tally": task_tally.state(), "config": asdict(cfg)}, tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    (ckdir / "latest").write_text(final.name)
    return final


def load_checkpoint(out: Path, model, optimizer) -> dict:
    """Restore ``out``'s latest checkpoint into ``model`` (adapter weights), ``optimizer`` and the global
    RNGs; returns its state (``iteration``, ``task_tally`` when the run kept one)."""
    latest = Path(out) / "checkpoints" / "latest"
    if not latest.exists():
        raise FileNotFoundError(f"--resume: no checkpoint in {latest.parent}; "
                                "run without --resume to start fresh")
    d = latest.parent / latest.read_text().strip()
    load_adapter_weights(model, d / "adapter")
    state = torch.load(d / "state.pt", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    torch.set_rng_state(state["rng"]["torch"])
    if "cuda" in state["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    return state
