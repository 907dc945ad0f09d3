"""What a training run logs: ``train.csv``, ``eval.csv`` and ``eval_by_task.jsonl`` (``RunLogs``: cut back
to the checkpoint a resumed run continues from, so every log reads as if the run had never stopped), the
TensorBoard writer, and rollout statistics that are not a plain mean of a batch field.
"""
from __future__ import annotations

import csv
import json
import shutil
import time
from pathlib import Path

import numpy as np

from agents.crash_points import crash_point

LOG_FILES = ("train.csv", "eval.csv", "eval_by_task.jsonl")
"""The logs a checkpoint records the size of; a resume cuts each back to that size."""
RUN_OUTPUTS = LOG_FILES + ("summary.json", "adapter", "checkpoints", "tb")
"""What a run writes besides ``config.json`` and its warm start: a fresh run removes them first."""


def log_sizes(out: Path) -> dict:
    """Each log's size in bytes (0 when absent): what a checkpoint records."""
    return {name: (Path(out) / name).stat().st_size if (Path(out) / name).exists() else 0
            for name in LOG_FILES}


def remove_run_outputs(out: Path, log=print) -> None:
    """A fresh run in a folder that holds an earlier run's outputs starts over: they go (said, not silent)."""
    found = [name for name in RUN_OUTPUTS if (Path(out) / name).exists()]
    if found:
        log(f"note: {out} held an earlier run's {', '.join(found)}; a fresh run removes them")
    for name in found:
        path = Path(out) / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def cut_to_size(path: Path, size: int) -> None:
    """``path`` as it was when it was ``size`` bytes long (what was appended since goes)."""
    have = path.stat().st_size if path.exists() else 0
    if have < size:
        raise ValueError(f"{path} holds {have} bytes, fewer than the {size} it held at the checkpoint being "
                         "resumed: it was changed since. Restore it, or start over with --overwrite")
    if path.exists():
        with open(path, "r+b") as f:
            f.truncate(size)


def cut_to_iteration(path: Path, upto: int) -> None:
    """Keep the whole lines of ``path`` (CSV: after its header) whose ``iteration`` is <= ``upto``, for
    checkpoints older than recorded log sizes; a half-written last line goes."""
    if not path.exists():
        return
    text = path.read_text()
    lines = text.split("\n")[:-1]           # the part after the last newline was never finished
    if path.suffix == ".csv":
        if not lines:
            path.unlink()
            return
        header = next(csv.reader(lines[:1]))
        keep = [lines[0]] + [line for line, row in zip(lines[1:], csv.reader(lines[1:]))
                             if len(row) == len(header) and int(row[header.index("iteration")]) <= upto]
    else:
        keep = [line for line in lines if line.strip() and json.loads(line)["iteration"] <= upto]
    path.write_text("".join(line + "\n" for line in keep))


class CsvLog:
    """Append-only CSV whose columns are fixed by its header (its first row's keys when new)."""

    def __init__(self, path: Path):
        self.path, self.fields = Path(path), None
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, newline="") as f:
                self.fields = next(csv.reader(f))

    def write(self, row: dict) -> None:
        new = self.fields is None
        if new:
            self.fields = list(row.keys())
        with open(self.path, "a", newline="") as f:
            w = csv.DictWriter(f, self.fields, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow(row)


class RunRecord:
    """What a run carries from one process to the next in its checkpoints: ``eval_before`` and the iteration
    of the last logged evaluation (``kept``), the seconds each process trained (a stopped one up to its
    last checkpoint, so ``wall_s`` counts every part) and the logs' sizes. ``resumed``: the record
    restored from a checkpoint, None for a new run."""

    def __init__(self, saved: dict | None = None):
        self.resumed = saved
        self.kept = {k: saved[k] for k in ("eval_before", "last_eval") if k in saved} if saved else {}
        self.parts = list(saved.get("wall_s_parts", [])) if saved else []
        self.start = time.perf_counter()

    def evaluated(self, it: int) -> bool:
        """Whether the logs kept at the checkpoint hold iteration ``it``'s evaluation (a record without log
        sizes predates ``last_eval``: its logs were cut by iteration, so they hold it if it ran)."""
        return self.kept.get("last_eval") == it or "log_sizes" not in (self.resumed or {})

    def seconds(self) -> list:
        return self.parts + [time.perf_counter() - self.start]

    def for_checkpoint(self, out: Path) -> dict:
        return {**self.kept, "wall_s_parts": self.seconds(), "log_sizes": log_sizes(out)}

    def summary(self) -> dict:
        parts = self.seconds()
        before = {"eval_before": self.kept["eval_before"]} if "eval_before" in self.kept else {}
        return {**before, "wall_s": sum(parts), "wall_s_parts": parts}


class RunLogs:
    """A run's logs in ``out``. For a resume (``resumed``: the checkpoint's record) each is cut back to its
    size when the checkpoint was written, so what came after, a half-written last line included, goes;
    a checkpoint that predates recorded sizes keeps the rows up to its iteration ``done``. Without a
    checkpoint the logs start empty."""

    def __init__(self, out: Path, resumed: dict | None, done: int):
        self.out = Path(out)
        for name in LOG_FILES:
            path = self.out / name
            if resumed is None:
                path.unlink(missing_ok=True)
            elif "log_sizes" in resumed:
                cut_to_size(path, resumed["log_sizes"].get(name, 0))
            else:
                cut_to_iteration(path, done)
        self.train, self.eval = CsvLog(self.out / "train.csv"), CsvLog(self.out / "eval.csv")

    def write_train(self, metrics: dict) -> None:
        self.train.write(metrics)
        crash_point("train_log")

    def write_eval(self, it: int, metrics: dict, by_task: dict) -> None:
        self.eval.write({"iteration": it, **metrics})
        crash_point("eval_log")
        with open(self.out / "eval_by_task.jsonl", "a") as f:
            f.write(json.dumps({"iteration": it, "by_task": by_task}) + "\n")


def open_tensorboard(out: Path, done: int):
    """A TensorBoard writer under ``out/tb`` that drops the events of a stopped part after the checkpoint
    of iteration ``done`` (0: all), or None without the tensorboard package (said)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        print("tensorboard is not installed; logging to CSV only (pip install tensorboard)")
        return None
    return SummaryWriter(str(Path(out) / "tb"), purge_step=done + 1 if done else 0)


def mixed_group_share(ro) -> float:
    """Share of a rollout's groups whose episodes did not all return the same: only those carry an
    episode-level (GRPO) signal; the rest get a zero episode advantage."""
    first_row = np.unique(ro.env_index, return_index=True)[1]       # every episode has a first step
    episode_group = np.asarray(ro.batch.group_id)[first_row]
    returns = np.round(np.asarray(ro.episode_return, dtype=np.float64), 6)
    groups = np.unique(episode_group)
    if len(groups) == 0:
        return 0.0
    return float(np.mean([np.ptp(returns[episode_group == g]) > 0 for g in groups]))
