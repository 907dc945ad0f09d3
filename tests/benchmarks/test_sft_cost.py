"""benchmarks/speed/sft_cost.py: every variant times the same batches in its own process."""
import json

import pytest

from benchmarks.speed import sft_cost


def test_sft_cost_times_the_same_batches_in_each_variant(tmp_path, capsys):
    out = tmp_path / "cost.json"
    sft_cost.main(["--preset", "smoke", "--tasks", "3", "--batches", "2", "--json", str(out)])
    results = {r["variant"]: r for r in json.loads(out.read_text())}
    assert list(results) == list(sft_cost.VARIANTS)
    losses = [r["losses"] for r in results.values()]
    assert all(len(x) == 2 for x in losses)
    for other in losses[1:]:                      # same batches, same numbers: only the cost differs
        assert other == pytest.approx(losses[0], rel=1e-4)
    assert results["checkpointed"]["checkpointing"] and not results["shared"]["checkpointing"]
    assert all(r["peak_rss_gb"] >= r["rss_before_gb"] > 0 for r in results.values())
    # checkpointing runs the plain layout: the same positions; sharing runs its own count
    assert results["checkpointed"]["tokens"] == results["plain"]["tokens"]
    assert all(len(r["tokens"]) == 2 and min(r["tokens"]) > 0 for r in results.values())
    shown = capsys.readouterr().out
    assert "checkpointed" in shown and "vs shared" in shown
    assert f"({results['shared']['tokens'][1]:>6} tok)" in shown.splitlines()[-1]   # the last batch's row


def test_sft_cost_refuses_empty_work():
    with pytest.raises(SystemExit, match="--tasks, --batches and --rounds must be >= 1"):
        sft_cost.main(["--preset", "smoke", "--batches", "0"])


def test_paired_mode_times_shared_and_plain_back_to_back_with_an_interval(tmp_path, capsys):
    out = tmp_path / "paired.json"
    sft_cost.main(["--preset", "smoke", "--tasks", "3", "--batches", "2", "--paired", "--rounds", "2",
                   "--json", str(out)])
    res = json.loads(out.read_text())
    assert sorted((p["batch"], p["round"]) for p in res["pairs"]) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(p["shared_s"] > 0 and p["plain_s"] > 0 for p in res["pairs"])
    assert all(p["shared_tokens"] <= p["plain_tokens"] for p in res["pairs"])   # sharing only where it saves
    lo, hi = res["ratio_ci"]
    assert lo <= res["ratio"] <= hi
    assert "back to back" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--rounds"):
        sft_cost.main(["--preset", "smoke", "--paired", "--rounds", "0"])
