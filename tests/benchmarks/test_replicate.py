"""bipace-compare's default: rerun committed cells, check replication, pool, verdict, figure; and the
inputs it refuses before any work. The end-to-end case plays a tiny scripted TextCraft cell (smoke preset)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.credit import advantage_accuracy as aa
from benchmarks.credit import leaderboard, replicate
from benchmarks.credit.cells import CELLS, Cell, Size
from benchmarks.learning import compare

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY_SIZE = Size(tasks=3, group_size=3, samples=3, screen_repeats=3, candidates=12, truth="strata")
TINY_SETS = ("max_steps=6", "history_length=6")


# ---------------------------------------------------------------------------------- pair agreement
@pytest.mark.parametrize("a, b, agree, why", [
    ((0.05, 0.03, 0.07, True), (0.04, 0.01, 0.07, True), True, ""),
    ((0.05, 0.03, 0.07, True), (0.00, -0.02, 0.02, False), False, "intervals apart"),
    # overlapping intervals, but one batch separates the pair upward and the other sees it below 0
    ((0.03, 0.001, 0.06, True), (-0.01, -0.04, 0.02, False), False, "a separated sign flips"),
    ((0.01, -0.01, 0.03, False), (-0.01, -0.03, 0.01, False), True, ""),
])
def test_a_pair_replicates_when_intervals_overlap_and_no_separated_sign_flips(a, b, agree, why):
    c = replicate.check_pair("pace - gigpo", a, b)
    assert c.agree is agree and c.why == why


def _column(label, pairs, parts=()):
    return leaderboard.Column(label, {("gigpo", "pearson"): (0.5, 0.4, 0.6)},
                              {(p, "pearson"): v for p, v in pairs.items()}, 0.9, frozenset(), parts)


def test_replication_lines_put_the_decomposition_first_and_say_what_disagrees():
    committed = _column("c", {"grpo - gigpo": (0.0, -0.01, 0.01, False),
                              "pace - gigpo": (0.05, 0.03, 0.07, True),
                              "rloo - gigpo": (-0.03, -0.05, -0.01, True)})
    rerun = _column("r", {"grpo - gigpo": (0.0, -0.01, 0.01, False), "pace - gigpo": (0.05, 0.02, 0.08, True),
                          "rloo - gigpo": (0.03, 0.01, 0.05, True)})
    checks = replicate.check_replication(committed, rerun)
    assert [c.pair for c in checks] == ["pace - gigpo", "grpo - gigpo", "rloo - gigpo"]
    ok, lines = replicate.replication_lines("cell", "how", checks)
    assert not ok and "DOES NOT REPLICATE" in lines[0] and "2 of 3 pairs agree" in lines[0]
    assert any(line.strip().startswith("- rloo - gigpo")
               and "disagree (intervals apart; a separated sign flips)" in line for line in lines)
    assert not any("grpo - gigpo" in line for line in lines)       # unseparated and agreeing: not listed


# ---------------------------------------------------------------------------------- the committed cells
def test_every_committed_cell_is_present_and_matches_cells_py():
    for name in CELLS:
        assert replicate.check_committed(name) == [], name
        assert replicate.cell_cost(name) > 0


def test_the_default_takes_the_cheapest_cells_that_fit_and_a_tiny_budget_names_the_cheapest():
    plans, why = replicate.plan_cells(None, False, replicate.BUDGET_MIN)
    costs = {n: replicate.cell_cost(n) for n in CELLS}
    assert sum(p.cost_s for p in plans) + replicate.OVERHEAD_S <= replicate.BUDGET_MIN * 60
    left = [n for n in CELLS if n not in {p.name for p in plans}]
    room = replicate.BUDGET_MIN * 60 - replicate.OVERHEAD_S - sum(p.cost_s for p in plans)
    assert all(costs[n] > room for n in left)                    # nothing left out that would still fit
    assert "Not rerun" in why and all(n in why for n in left)
    cheapest = min(costs, key=costs.get)
    with pytest.raises(replicate.CompareInputError, match=f"the cheapest, {cheapest}, takes about"):
        replicate.plan_cells(None, False, 0.5)
    full, why = replicate.plan_cells(None, True, replicate.BUDGET_MIN)
    assert {p.name for p in full} == set(CELLS) and "min from their committed timings" in why


def test_a_missing_or_stale_committed_cell_is_named_before_any_work(tmp_path, monkeypatch):
    real = CELLS["textcraft-eps0.5"]
    monkeypatch.setitem(CELLS, "gone", Cell(real.preset, real.policy, real.size, real.ingredients,
                                            splits=real.splits, batches=(str(tmp_path / "nowhere"),)))
    with pytest.raises(replicate.CompareInputError, match="gone: committed batch .*nowhere is missing"):
        replicate.plan_cells(["textcraft-eps0.5"], False, 15)
    # a cell whose size changed in cells.py no longer matches its committed manifest
    monkeypatch.setitem(CELLS, "gone", Cell(real.preset, real.policy, TINY_SIZE, real.ingredients,
                                            splits=real.splits, batches=real.batches))
    with pytest.raises(replicate.CompareInputError, match="tasks: 20 there, 3 in cells.py"):
        replicate.plan_cells(None, True, 15)


def test_an_out_folder_of_another_command_is_refused(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "curves.csv").write_text("x")
    with pytest.raises(replicate.CompareInputError, match="holds files of another command .*curves.csv"):
        replicate.claim_out(other)
    warm = tmp_path / "warm"
    warm.mkdir()
    (warm / replicate.MARKER).write_text(json.dumps({"mode": "warm-start"}))
    with pytest.raises(replicate.CompareInputError, match="mode 'warm-start'"):
        replicate.claim_out(warm)
    mine = tmp_path / "mine"
    replicate.claim_out(mine)
    replicate.claim_out(mine)                                   # its own folder: continued
    with pytest.raises(SystemExit, match="holds the leaderboard cells' reruns"):
        compare.claim_warm_start_out(mine)


def test_compare_refuses_mixed_flags_and_unknown_cells(capsys):
    with pytest.raises(SystemExit):
        compare.main(["--cells", "no-such-cell"])
    assert "invalid choice: 'no-such-cell'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main(["--policy", "cells", "--train"])
    assert "--train belong to --policy warm-start" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main(["--policy", "warm-start", "--full"])
    assert "--cells and --full rerun" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main(["--budget", "-1"])
    assert "--budget must be a positive" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- end to end, tiny
@pytest.fixture(scope="module")
def tiny_cells(tmp_path_factory):
    """Two tiny scripted TextCraft cells (smoke preset) with committed batches at seed 0, one replicated
    on disjoint goals and one on the same goals; CELLS holds only them while the test runs."""
    root = tmp_path_factory.mktemp("committed")
    cells = {}
    for name, how in (("tiny-disjoint", "disjoint"), ("tiny-same", "same-goals")):
        folder = root / name
        cells[name] = Cell("smoke", "scripted:0.6", TINY_SIZE, sets=TINY_SETS, batches=(str(folder),),
                           replication=how)
    saved = dict(CELLS)
    CELLS.clear()
    CELLS.update(cells)
    try:
        for name in cells:
            argv = ["--cell", name, "--out", str(root / name), "--no-progress", "--workers", "1"]
            assert aa.main(argv) == 0
        yield root
    finally:
        CELLS.clear()
        CELLS.update(saved)


def test_the_default_reruns_checks_pools_and_draws(tiny_cells, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(replicate, "OVERHEAD_S", 0.0)
    out = tmp_path / "compare"
    assert compare.main(["--out", str(out), "--full", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    summary = (out / "summary.md").read_text()
    assert summary.strip() in printed
    for name in ("tiny-disjoint", "tiny-same"):
        assert f"**{name}: " in summary and (out / "cells" / f"{name}.log").stat().st_size > 0
        manifest = json.loads((out / "cells" / name / "manifest.json").read_text())
        assert manifest["seed"] == replicate.RERUN_SEED
    committed = set(json.loads((tiny_cells / "tiny-disjoint" / "goals.json").read_text()))
    rerun = set(json.loads((out / "cells" / "tiny-disjoint" / "goals.json").read_text()))
    assert rerun and not rerun & committed                        # disjoint goals
    same = json.loads((tiny_cells / "tiny-same" / "goals.json").read_text())
    assert set(json.loads((out / "cells" / "tiny-same" / "goals.json").read_text())) <= set(same)
    assert not (out / "cells" / "tiny-same-pooled").exists()      # shared goals: compared, never pooled
    replicated = "**tiny-disjoint: replicates**" in summary
    assert (out / "cells" / "tiny-disjoint-pooled" / "pairs.csv").exists() == replicated
    assert "Verdict" in summary and "- **textcraft**" in summary
    assert (out / "leaderboard.png").read_bytes()[:8] == PNG_MAGIC
    table = (out / "leaderboard.md").read_text()
    assert "tiny-disjoint rerun (" in table and "tiny-same rerun (" in table
    # a second call continues the same folder (the reruns are finished: nothing is played again)
    stamp = (out / "cells" / "tiny-same" / "batch.pkl").stat().st_mtime_ns
    assert compare.main(["--out", str(out), "--full", "--no-progress"]) == 0
    assert (out / "cells" / "tiny-same" / "batch.pkl").stat().st_mtime_ns == stamp


def test_a_committed_seed_is_refused_for_a_rerun(tiny_cells, tmp_path):
    with pytest.raises(replicate.CompareInputError, match="--seed 0 is a committed batch's seed"):
        replicate.run_cells(None, tmp_path / "x", full=True, seed=0, progress=False)


def test_the_forest_plot_draws_any_folders_and_marks_fresh_ones(tiny_cells, tmp_path, capsys):
    png = tmp_path / "lb.png"
    folders = [str(tiny_cells / n) for n in ("tiny-disjoint", "tiny-same")]
    leaderboard.main(folders + ["--png", str(png), "--fresh", "tiny-same"])
    assert png.read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(SystemExit):
        leaderboard.main(folders + ["--png", str(png), "--fresh", "nope"])
    assert "--fresh ['nope']: no column has that label" in capsys.readouterr().err
    assert Path(png).stat().st_size > 10_000


def test_the_cells_table_reads_each_batchs_own_files(tiny_cells):
    folder = tiny_cells / "tiny-same"
    text = leaderboard.main([str(folder), "--batches", str(folder)])
    row = next(line for line in text.splitlines() if line.startswith("| `tiny-same` |"))
    manifest = json.loads((folder / "manifest.json").read_text())
    rel = json.loads((folder / "reliability.json").read_text())
    assert f"| 3 x 3, strata K = {manifest['samples']} | seed 0 |" in row
    assert f"{rel['unbiased']:.3f} / {rel['split_half']:.3f}" in row
    with pytest.raises(SystemExit):
        leaderboard.main([str(folder), "--batches", str(tiny_cells)])
