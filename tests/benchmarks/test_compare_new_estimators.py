"""bipace-compare accepts the spec-3 estimators and HCAPO/RELACE (whose hindsight pass the trainer runs):
one tiny iteration each through the real trainer, with their step-group statistics logged."""
from __future__ import annotations

import csv

from benchmarks.learning import compare
from estimators import REGISTRY

NEW = ["ecpo", "progpo", "gated_bepo", "hcapo", "relace"]
TINY = ["--preset", "tiny", "--set", "iterations=1", "--set", "batch_tasks=2", "--set", "group_size=2",
        "--set", "max_steps=2", "--set", "max_new_tokens=6", "--set", "sft_steps=2", "--set", "eval_tasks=2",
        "--set", "eval_batch=2", "--set", "eval_every=0", "--set", "eval_before=false",
        "--set", "progress=false"]


def test_compare_runs_the_new_estimators(tmp_path):
    assert all(name in REGISTRY for name in NEW)
    assert compare.main(["--estimators", *NEW, "--seeds", "0", "--out", str(tmp_path), *TINY]) == 0
    with open(tmp_path / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["estimator"] for r in rows} == set(NEW)
    train = [r for r in rows if r["iteration"] == "1"]
    assert len(train) == len(NEW) and all(r["success"] != "" for r in train)
