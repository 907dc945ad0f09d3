"""What a training run logs: ``train.csv``/``eval.csv`` (``CsvLog``, trimmed to the last checkpoint when
a run resumes) and rollout statistics that are not a plain mean of a batch field.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


class CsvLog:
    """Append-only CSV whose columns are fixed by the first row; rows past ``keep_upto`` are dropped
    when a resumed run reopens it."""

    def __init__(self, path: Path, keep_upto: int | None = None):
        self.path, self.fields = path, None
        if path.exists() and keep_upto is not None:
            with open(path) as f:
                rows = [r for r in csv.DictReader(f) if int(r["iteration"]) <= keep_upto]
            if rows:
                self.fields = list(rows[0].keys())
                with open(path, "w", newline="") as f:
                    w = csv.DictWriter(f, self.fields)
                    w.writeheader()
                    w.writerows(rows)
            else:
                path.unlink()
        elif path.exists():
            path.unlink()

    def write(self, row: dict) -> None:
        new = self.fields is None
        if new:
            self.fields = list(row.keys())
        with open(self.path, "a", newline="") as f:
            w = csv.DictWriter(f, self.fields, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerow(row)


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
