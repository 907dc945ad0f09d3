"""bipace-compare on a tiny budget (real trainer, tiny model, TextCraft): output structure, reuse of
finished runs, and argument errors."""
from __future__ import annotations

import csv

import pytest

from benchmarks.learning import compare

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = ["--preset", "smoke"]       # agents/presets.py: 2 iterations of 2 goals x G=2, evaluated each


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare")
    rc = compare.main(["--estimators", "grpo", "bipace", "--seeds", "0", "1", "--out", str(out), *TINY])
    assert rc == 0
    return out


def test_outputs_structure(tiny_run):
    with open(tiny_run / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == compare.CSV_FIELDS
    runs = {(r["estimator"], r["seed"]) for r in rows}
    assert runs == {("grpo", "0"), ("grpo", "1"), ("bipace", "0"), ("bipace", "1")}
    for est, seed in runs:
        its = sorted(int(r["iteration"]) for r in rows if (r["estimator"], r["seed"]) == (est, seed))
        assert its == [0, 1, 2]                    # 0 = evaluation before training
    train = [r for r in rows if r["iteration"] != "0"]
    for r in train:
        assert 0.0 <= float(r["success"]) <= 1.0
        assert float(r["estimator_s"]) >= 0 and float(r["rollout_s"]) > 0 and float(r["update_s"]) > 0
        assert r["eval_success"] != ""             # eval_every=1
        if r["estimator"] == "grpo":
            assert r["singleton_rate"] == "" and r["clusters_per_group"] == ""
        else:
            assert 0.0 <= float(r["singleton_rate"]) <= 1.0
            assert float(r["clusters_per_group"]) >= 1.0
            assert float(r["mean_group_size"]) >= 1.0
    assert len({r["eval_success"] for r in rows if r["iteration"] == "0"}) == 1   # one shared start
    table = (tiny_run / "summary.md").read_text().splitlines()
    body = [line.split("|")[1].strip() for line in table if line.startswith("| ") and "estimator" not in line]
    assert body == ["grpo", "bipace"]
    assert (tiny_run / "curves.png").read_bytes()[:8] == PNG_MAGIC
    import matplotlib.image
    assert matplotlib.image.imread(tiny_run / "curves.png").shape[1] > 1000
    # one SFT warm start, made by the first run, starts every run
    files = (tiny_run / "runs").glob("*/warm_start/*.safetensors")
    weights = {p.parent.parent.name: p.read_bytes() for p in files}
    assert len(weights) == 4 and len(set(weights.values())) == 1


def test_finished_runs_are_reused(tiny_run, capsys):
    before = (tiny_run / "curves.csv").read_text()
    stamp = (tiny_run / "runs" / "grpo_seed0" / "summary.json").stat().st_mtime_ns
    args = ["--estimators", "grpo", "bipace", "--seeds", "0", "1", "--out", str(tiny_run), *TINY]
    assert compare.main(args) == 0
    assert "reusing finished run" in capsys.readouterr().out
    assert (tiny_run / "runs" / "grpo_seed0" / "summary.json").stat().st_mtime_ns == stamp
    assert (tiny_run / "curves.csv").read_text() == before


def test_bad_arguments(tmp_path, capsys):
    assert compare.main(["--estimators", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown estimator" in capsys.readouterr().err
    assert compare.main(["--set", "no_such_field=1", "--out", str(tmp_path)]) == 2
    assert "TrainConfig field" in capsys.readouterr().err
    assert compare.main(["--set", "tensorboard=maybe", "--out", str(tmp_path)]) == 2
    assert compare.main(["--preset", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err


def test_preset_and_set_make_every_runs_config(tmp_path, monkeypatch):
    """Each run's config is the preset's with --set applied (and its estimator, seed, folder): no flag of
    the comparison's own copies a TrainConfig field."""
    import dataclasses
    from agents.presets import get_preset
    seen = []
    monkeypatch.setattr(compare, "shared_warm_start", lambda base, out: None)     # no 800-step SFT here
    monkeypatch.setattr(compare, "run_one", lambda cfg, warm, fresh: seen.append(cfg) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        compare.main(["--preset", "tiny", "--set", "iterations=3", "--estimators", "gigpo", "--seeds", "4",
                      "--out", str(tmp_path)])
    want = dataclasses.replace(get_preset("tiny", ["iterations=3"]), estimator="gigpo", seed=4,
                               out_dir=str(tmp_path / "runs" / "gigpo_seed4"))
    assert seen == [want] and seen[0].preset_name == "tiny"
    assert not any(a.dest in ("iterations", "env", "model") for a in compare.build_parser()._actions)


def test_summary_pools_success_over_seeds_with_a_binomial_ci_and_other_figures_with_a_t_interval():
    rows = []
    for seed, (train, ev) in enumerate([((0.25, 0.5), 0.4), ((0.75, 1.0), 0.6)]):
        rows.append({"estimator": "grpo", "seed": seed, "iteration": 0, "eval_success": 0.5, "eval_n": 100})
        for it, s in enumerate(train, 1):
            rows.append({"estimator": "grpo", "seed": seed, "iteration": it, "success": s,
                         "rollout_s": 10 + 2 * seed,
                         "eval_success": ev if it == 2 else "", "eval_n": 100 if it == 2 else ""})
    line = [line for line in compare.summary_table(rows, ["grpo"], {}, 2, "h", 8).splitlines()
            if line.startswith("| grpo")][0]
    cells = [c.strip() for c in line.split("|")[1:-1]]
    # training: mean of (0.375, 0.875) over 2 x 2 x 8 = 32 episodes; held-out end: 0.5 over 200 episodes
    assert cells[2] == f"62.5 ± {196 * (0.625 * 0.375 / 32) ** 0.5:.1f} (n=32)"
    assert cells[3] == f"50.0 ± {196 * (0.25 / 200) ** 0.5:.1f} (n=200)" and cells[4] == cells[3]
    # rollout s: seeds 10 and 12 -> mean 11, t(1) = 12.706 x std 1.414 / sqrt 2 = 12.7
    assert cells[9] == "11.0 ± 12.7"


def test_plot_axes_follow_the_data():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [10.0, 12.0, 14.0])
    from benchmarks.plotting import data_limits
    lo, hi = data_limits(ax, 100.0)
    assert 5 < lo < 10 and 14 < hi < 20
    plt.close(fig)


def test_the_accuracy_stage_leads_and_says_when_it_cannot_measure(tmp_path, monkeypatch, capsys):
    """With a size for the preset, the accuracy stage runs on the shared warm start before any RL run; the
    tiny model never wins a goal, so the summary says every advantage would be zero instead of a table."""
    from benchmarks.credit import advantage_accuracy as aa
    monkeypatch.setitem(aa.SIZES, "smoke", aa.Size(tasks=2, group_size=2, samples=2, screen_repeats=1))
    order = []
    real_stage, real_run = compare.accuracy_stage, compare.run_one
    monkeypatch.setattr(compare, "accuracy_stage", lambda *a: order.append("accuracy") or real_stage(*a))
    monkeypatch.setattr(compare, "run_one", lambda *a: order.append("rl") or real_run(*a))
    out = tmp_path / "c"
    assert compare.main(["--estimators", "grpo", "--seeds", "0", "--out", str(out), "--train", *TINY]) == 0
    assert order == ["accuracy", "rl"]
    summary = (out / "summary.md").read_text()
    assert summary.index("Advantage accuracy") < summary.index("Short RL runs")
    assert "never won any candidate goal" in summary
    assert (out / "accuracy" / "screen.json").exists()
    assert compare.main(["--estimators", "grpo", "--seeds", "0", "--out", str(tmp_path / "d"),
                         "--no-accuracy", *TINY]) == 0
    assert "Advantage accuracy" not in (tmp_path / "d" / "summary.md").read_text()


def test_by_default_a_preset_with_an_accuracy_size_runs_only_that_stage(tmp_path, monkeypatch):
    """The short RL runs do not separate estimators; a preset with an accuracy size runs the accuracy stage
    alone unless --train, and the summary points to the table that answers the learning question."""
    from benchmarks.credit import advantage_accuracy as aa
    monkeypatch.setitem(aa.SIZES, "smoke", aa.Size(tasks=2, group_size=2, samples=2, screen_repeats=1))
    order = []
    monkeypatch.setattr(compare, "accuracy_stage", lambda *a: order.append("accuracy") or "accuracy table\n")
    monkeypatch.setattr(compare, "run_one", lambda *a: order.append("rl"))
    assert compare.main(["--estimators", "grpo", "--seeds", "0", "--out", str(tmp_path / "c"), *TINY]) == 0
    assert order == ["accuracy"]
    summary = (tmp_path / "c" / "summary.md").read_text()
    assert "No RL runs (--train runs them)" in summary and compare.FULL_LEARNING in summary


def test_the_accuracy_stage_says_not_separated_and_points_to_the_full_benchmark(tmp_path, monkeypatch):
    from benchmarks.credit import advantage_accuracy as aa
    from benchmarks.credit.advantage_report import Scored
    pairs = [{"pair": "bipace - gigpo", "metric": "pearson", "diff": 0.05, "lo": -0.04, "hi": 0.14,
              "beyond_interval": False, "better": ""}]
    scored = Scored("common", ["bipace", "gigpo"], {}, {}, {}, {}, pairs, 40, 8)

    def fake_run(args):
        (tmp_path / "acc" / "summary.md").write_text("table\n")
        return {"results": scored}
    (tmp_path / "acc").mkdir()
    monkeypatch.setattr(aa, "run", fake_run)
    text = compare.accuracy_stage("compare", [], "policy", tmp_path / "acc")
    assert "Not separated at this size (8 goals)" in text and compare.FULL_ACCURACY in text
    pairs[0].update(lo=0.01, beyond_interval=True, better="bipace")
    (tmp_path / "acc" / "summary.md").write_text("table\n")
    assert "Not separated" not in compare.accuracy_stage("compare", [], "policy", tmp_path / "acc")
