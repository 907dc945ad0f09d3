"""A training run's checkpoints and what a resume may change.

``<out>/checkpoints/iter_NNNNNN/`` holds the LoRA adapter (peft format) and ``state.pt``: iteration,
optimizer, RNG states, the task tally, the config, and the run's record (``eval_before``, the seconds
each process spent, each log's size). A checkpoint is written to a temporary folder and renamed, and
``latest`` is replaced whole, so a run killed mid-write keeps the previous one.
``Trainer(cfg with resume=True)`` continues from the newest checkpoint that reads back whole: a
truncated one is named in a warning and the one before it is used. A resume must run with the same
settings as the run it continues, but for ``RESUME_MAY_CHANGE``.
"""
from __future__ import annotations

import json
import random
import shutil
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np
import torch

from agents.crash_points import crash_point
from agents.finite import check_weights

RESUME_MAY_CHANGE = ("iterations", "resume", "overwrite", "out_dir", "preset_name", "progress", "tensorboard",
                     "checkpoint_every")
"""Fields a resume may set otherwise than the run it continues: more iterations (to extend a finished
run), and what only changes where and how often the run is saved or shown. Every other field changes what
the run computes (``--set lr=0.5`` would be recorded while the restored optimizer trained on at the old
rate, another estimator or LoRA shape would not match the checkpoint), so a resume with another value is
refused, naming the fields. ``threads`` is among them: on CPU, torch splits sums and matrix products by
thread, so another thread count rounds differently and the resumed run would no longer be the one it
continues."""


def save_checkpoint(out: Path, it: int, model, optimizer, task_tally, cfg, record: dict | None = None
                    ) -> Path:
    """Write iteration ``it``'s checkpoint under ``out/checkpoints`` and point ``latest`` at it; ``record``
    (JSON-able) is what the run needs to resume its logs and summary. Refuses non-finite weights."""
    check_weights(model, f"checkpoint {it}")
    ckdir = Path(out) / "checkpoints"
    final = ckdir / f"iter_{it:06d}"
    tmp = ckdir / f".tmp_iter_{it:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "adapter")
    crash_point("checkpoint")
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save({"iteration": it, "optimizer": optimizer.state_dict(), "rng": rng,
                "task_tally": task_tally.state(), "config": asdict(cfg), "record": record or {}},
               tmp / "state.pt")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    crash_point("checkpoint_latest")
    replace_text(ckdir / "latest", final.name)
    return final


def save_adapter(model, folder: Path) -> None:
    """The final adapter, written whole or not at all (a folder renamed into place); never non-finite."""
    check_weights(model, f"the adapter {folder}")
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    crash_point("adapter")


def replace_text(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def checkpoint_folders(out: Path) -> list[Path]:
    """``out``'s checkpoints, newest first (a folder is complete once renamed from its temporary name)."""
    return sorted((Path(out) / "checkpoints").glob("iter_*"), reverse=True)


def read_checkpoint(folder: Path, device) -> tuple[dict, dict]:
    """The adapter weights and the state of one checkpoint; raises when either does not read back whole."""
    from safetensors.torch import load_file
    weights = load_file(str(folder / "adapter" / "adapter_model.safetensors"), device=str(device))
    state = torch.load(folder / "state.pt", weights_only=False)
    missing = {"iteration", "optimizer", "rng"} - set(state)
    if missing:
        raise ValueError(f"state.pt lacks {sorted(missing)}")
    return weights, state


def load_checkpoint(out: Path, model, optimizer, iterations: int | None = None, log=print) -> dict | None:
    """Restore ``out``'s newest readable checkpoint into ``model`` (adapter weights), ``optimizer`` and the
    global RNGs; returns its state (``iteration``, ``task_tally``, ``record``), or None when ``out`` has no
    checkpoint yet. Either way one ``resume: ... at iteration N`` line says where the run goes on. A
    checkpoint that does not read back (a truncated ``state.pt`` or adapter) is
    named in a warning and the one before it is tried; ValueError when none reads, or when the newest is
    past ``iterations``."""
    from peft import set_peft_model_state_dict
    folders = checkpoint_folders(out)
    if not folders:
        log(f"resume: {out} has no checkpoint yet: the run starts again at iteration 1")
        return None
    problems = []
    for folder in folders:
        try:
            weights, state = read_checkpoint(folder, next(model.parameters()).device)
        except Exception as exc:         # whatever a cut file raises (EOFError, safetensors, zip errors)
            problems.append(f"{folder} ({type(exc).__name__}: {exc})")
            log(f"warning: checkpoint {folder} does not read back ({type(exc).__name__}: {exc}); trying the "
                "one before it")
            continue
        if iterations is not None and state["iteration"] > iterations:
            raise ValueError(f"--resume: {folder} is the checkpoint of iteration {state['iteration']}, past "
                             f"--iterations {iterations}; ask for {state['iteration']} or more")
        set_peft_model_state_dict(model, weights)
        optimizer.load_state_dict(state["optimizer"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        torch.set_rng_state(state["rng"]["torch"])
        if "cuda" in state["rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        # one line a resume always prints, read by benchmarks.learning.kill_resume
        log(f"resume: restored {folder.name} (iteration {state['iteration']}): the run continues at "
            f"iteration {state['iteration'] + 1}")
        return state
    raise ValueError(f"--resume: no checkpoint of {out} reads back: {'; '.join(problems)}. Restore one, or "
                     "start over with --overwrite")


def stored_settings(out: Path) -> dict | None:
    """The settings the run in ``out`` was started with: its ``config.json``, else its newest readable
    checkpoint's config; None when ``out`` holds neither."""
    path = Path(out) / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    for folder in checkpoint_folders(out):
        try:
            return torch.load(folder / "state.pt", weights_only=False)["config"]
        except Exception:
            continue
    return None


def resume_differences(stored: dict, cfg) -> list[str]:
    """``field: stored -> now`` for each field outside ``RESUME_MAY_CHANGE`` that ``cfg`` sets otherwise
    than ``stored`` (a field the stored run predates counts as its default)."""
    out = []
    for f in fields(cfg):
        if f.name in RESUME_MAY_CHANGE:
            continue
        before, now = stored.get(f.name, f.default), getattr(cfg, f.name)
        if before != now:
            out.append(f"{f.name}: {before!r} -> {now!r}")
    return out


def check_resume_settings(out: Path, cfg) -> None:
    """Raise when ``out`` holds no run to resume, or one started with other settings (naming them)."""
    stored = stored_settings(out)
    if stored is None:
        raise FileNotFoundError(f"--resume: {out} holds no run to resume (no config.json, no checkpoint); "
                                "run without --resume to start fresh")
    diff = resume_differences(stored, cfg)
    if diff:
        raise ValueError(f"--resume: {out} holds a run made with other settings: {'; '.join(diff)}. Resume "
                         f"with the run's own settings (its config.json; only {', '.join(RESUME_MAY_CHANGE)} "
                         "may change), or start a new run in another folder or with --overwrite")
