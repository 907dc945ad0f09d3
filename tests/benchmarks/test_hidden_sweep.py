"""The hidden-state study on a small scripted TextCraft cell (tiny model): every layer's states and the
replayed env state per row (layer_states.py), the sweep with its controls and half-split selection
(hidden_sweep.py), its report (hidden_report.py), and the errors a user can meet."""
import json
import pickle

import numpy as np
import pytest

import benchmarks.credit.advantage_accuracy as aa
from benchmarks.credit import hidden_report, hidden_select, hidden_sweep, layer_states

ARGS = ["--preset", "smoke", "--set", "max_steps=6", "--set", "history_length=6", "--tasks", "4",
        "--group-size", "3", "--samples", "3", "--screen-repeats", "3", "--candidates", "12", "--no-progress",
        "--policy", "scripted:0.6", "--workers", "1", "--estimators", "gigpo", "pace", "bigpo", "bipace"]


@pytest.fixture(scope="module")
def cell_folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("hidden") / "batch"
    assert aa.main(ARGS + ["--out", str(out)]) == 0
    layer_states.build(out, progress=False)
    return out


def test_layer_states_hold_every_block_and_reproduce_the_batchs_embedding(cell_folder):
    saved = pickle.loads((cell_folder / "batch.pkl").read_bytes())
    b = saved["ro"].batch
    with np.load(cell_folder / layer_states.FILE) as z:
        last, mean, state, gap = z["last"], z["mean"], z["state"], float(z["check_gap"])
    assert last.shape == mean.shape and last.shape[0] == len(b) and last.shape[1] >= 2
    assert gap < 1e-4                                         # the block the batch recorded, row for row
    assert not np.allclose(last, mean)
    # a replayed state is finer than the observation: equal states have equal anchors within a goal
    for s in np.unique(state):
        rows = np.flatnonzero(state == s)
        assert len({b.anchor[r] for r in rows}) == 1 and len(set(b.group_id[rows])) == 1


def test_a_finished_file_is_kept_and_one_from_another_manifest_is_refused(cell_folder, tmp_path):
    stamp = (cell_folder / layer_states.FILE).stat().st_mtime_ns
    layer_states.build(cell_folder, progress=False)
    assert (cell_folder / layer_states.FILE).stat().st_mtime_ns == stamp
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("batch.pkl", "score_inputs.npz", "manifest.json", layer_states.FILE):
        (moved / name).write_bytes((cell_folder / name).read_bytes())
    manifest = json.loads((moved / "manifest.json").read_text())
    (moved / "manifest.json").write_text(json.dumps({**manifest, "seed": manifest["seed"] + 1}))
    with pytest.raises(ValueError, match="another manifest.json"):
        layer_states.build(moved, progress=False)
    with pytest.raises(ValueError, match="another manifest.json"):
        hidden_sweep.load_part(moved, "0")


def test_pair_auc_and_size_matched_random_partitions():
    same = np.array([True, True, False, False])
    assert hidden_sweep.pair_auc(np.array([0.9, 0.8, 0.1, 0.2]), same) == 1.0
    assert hidden_sweep.pair_auc(np.array([0.5, 0.5, 0.5, 0.5]), same) == 0.5
    assert np.isnan(hidden_sweep.pair_auc(np.array([0.5, 0.4]), np.array([True, True])))


def test_the_sweep_spans_exact_to_one_cluster_per_goal_with_its_controls(cell_folder, tmp_path):
    sel = hidden_sweep.run_cell("tiny", [cell_folder], tmp_path, seed=0,
                                grid=hidden_sweep.Grid(layers=(1, -1), poolings=("last", "mean")))
    cell = hidden_sweep.load_cell("tiny", [cell_folder])
    rows = hidden_report.read_csv(tmp_path / "tiny" / "sweep.csv")
    goals = len(cell.members)
    assert {int(r["block"]) for r in rows} == {1, cell.n_layers}
    assert min(r["clusters"] for r in rows) == goals                 # one cluster per goal ...
    coarsest = [r for r in rows if r["clusters"] == goals]
    for r in coarsest:        # ... where bigpo and bipace are the goal controls and any partition is the same
        assert abs(r["bipace-pace_goal"]) < 1e-12 and abs(r["bigpo-gigpo_goal"]) < 1e-12
        assert abs(r["bipace-bipace_random"]) < 1e-12
    assert max(r["clusters"] for r in rows) > goals
    finest = max(rows, key=lambda r: r["clusters"])
    assert finest["singleton"] >= min(r["singleton"] for r in rows)
    # the random control keeps every goal's cluster sizes
    codes = hidden_sweep.clusters(cell, 0, "last", "raw", float(finest["eps"]))
    shuffled = hidden_sweep.random_partitions(cell, codes, np.random.default_rng(0))
    g = cell.parts[0].batch.view.group
    for grp in np.unique(g):
        m = g == grp
        assert sorted(np.bincount(codes[0][m])[np.bincount(codes[0][m]) > 0]) == \
            sorted(np.bincount(shuffled[0][m])[np.bincount(shuffled[0][m]) > 0])
    # selection on half A, scores on the disjoint half B; the paper's setting beside them
    assert not set(sel["goals_a"]) & set(sel["goals_b"])
    assert len(sel["goals_a"]) + len(sel["goals_b"]) == goals
    assert set(sel["chosen"]) == set(hidden_select.CRITERIA)
    assert sel["paper"]["setting"]["eps"] == 0.05 and "bipace-pace_lo" in sel["paper"]["on_b"]
    assert "no calibration" in sel["named"]["anchor-calibrated"]["reason"]        # the tiny model has none
    # the preset's choice between named settings: the better one on half A, its margin on half B
    usable = {n for n, p in sel["named"].items() if "setting" in p}
    assert "paper" in usable and "paper-7b" not in usable        # -8 lies beyond the tiny 4 blocks
    choice = sel["named_choice"]["bipace"]
    assert choice["chosen"] in usable and set(choice["versus"]) == usable - {choice["chosen"]}
    text = "\n".join(hidden_report.selection_table([tmp_path / "tiny"]))
    assert "paper's setting (in advance)" in text and "bipace_geometry" in text


def test_the_report_draws_the_auc_figure_and_prints_every_table(cell_folder, tmp_path, capsys):
    hidden_sweep.run_cell("tiny", [cell_folder], tmp_path, seed=1, grid=hidden_sweep.Grid(layers=(-1,)))
    assert hidden_report.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for title in ("AUC by depth", "chosen on half A", "The named settings", "Which named setting",
                  "beyond their intervals"):
        assert title in out
    assert (tmp_path / "auc.png").stat().st_size > 1000


@pytest.mark.parametrize("flags, message", [
    (["--layers", "99"], "out of range"),
    (["--poolings", "max"], "unknown pooling"),
    (["--radii", "-0.1"], "finite cosine distance"),
    (["--radii", "nan"], "finite cosine distance"),
])
def test_bad_sweep_input_is_refused_with_what_was_wrong(cell_folder, tmp_path, flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        hidden_sweep.main(["--cell", f"tiny={cell_folder}", "--out", str(tmp_path)] + flags)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "tiny" / "sweep.csv").exists()


def test_a_folder_without_layer_states_says_how_to_make_them(tmp_path, capsys):
    (tmp_path / "b").mkdir()
    with pytest.raises(SystemExit):
        hidden_sweep.main(["--cell", f"x={tmp_path / 'b'}", "--out", str(tmp_path / "o")])
    assert "benchmarks.credit" in capsys.readouterr().err


def test_rescore_adds_the_estimators_registered_since_the_run_and_keeps_the_rest(cell_folder, tmp_path):
    import shutil
    from benchmarks.credit.score_inputs import ScoreInputs
    run = tmp_path / "run"
    shutil.copytree(cell_folder, run)
    before, _ = ScoreInputs.load(run / "score_inputs.npz")
    assert "pace_goal" not in before.estimates["common"]           # the run scored four estimators
    assert aa.main(["--rescore", "--out", str(run)]) == 0
    after, _ = ScoreInputs.load(run / "score_inputs.npz")
    assert {"pace_goal", "gigpo_goal", "grpo"} <= set(after.estimates["common"])
    np.testing.assert_array_equal(after.estimates["common"]["bipace"].adv,
                                  before.estimates["common"]["bipace"].adv)
    np.testing.assert_array_equal(after.adv, before.adv)
    assert "pace_goal" in (run / "scores.csv").read_text()


def test_cells_keep_the_setting_their_batches_hold_unless_the_user_sets_one():
    from benchmarks.credit.aa_settings import CELL_BIGPO_SETTING, cell_config
    cell = cell_config({"preset": "webshop-table", "set": []})
    assert cell.bigpo_setting == CELL_BIGPO_SETTING == "anchor-calibrated"
    assert (cell.resolved_hidden_layer(), cell.resolved_eps()) == (-1, 0.002)
    paper = "bigpo_setting=paper"
    for sets, want in (([paper], (None, 0.05)), ([paper, "eps=0.01"], (None, 0.01)),
                       ([paper, "hidden_layer=-4"], (-4, 0.05)), (["eps=0.01"], (-1, 0.01))):
        cfg = cell_config({"preset": "webshop-table", "set": sets})
        assert (cfg.resolved_hidden_layer(), cfg.resolved_eps()) == want, sets
    # a model without a calibration keeps its own default
    assert cell_config({"preset": "smoke", "set": []}).resolved_eps() == 0.05
