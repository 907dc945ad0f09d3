"""benchmarks/learning/train_table.py: a table continues where it stopped, and refuses to mix settings."""
import json

import numpy as np
import pytest

from benchmarks.learning import train_table


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


# the textcraft-table preset on the tiny model, a few seconds a run; RL's LoRA on the top 2 of its 4 blocks
TINY = sets("model=tiny", "sft_steps=2", "iterations=1", "batch_tasks=2", "group_size=2", "eval_tasks=2",
            "eval_batch=2", "eval_repeats=1", "max_steps=2", "max_new_tokens=4", "threads=1",
            "lora_layers=2") + ["--seeds", "0", "--screen-repeats", "0"]


@pytest.fixture
def keep_torch_threads():
    import torch
    n = torch.get_num_threads()     # main() sets the process-wide thread count; later tests keep theirs
    yield
    torch.set_num_threads(n)


@pytest.fixture
def rl_goals(monkeypatch) -> list:
    """The sorted goal ids each Trainer built with ``train_tasks`` (an RL run) was given, in order."""
    from agents.trainer import Trainer
    drawn, init = [], Trainer.__init__

    def spy(self, cfg, *args, train_tasks=None, **kwargs):
        if train_tasks is not None:
            drawn.append(sorted(map(str, train_tasks)))
        init(self, cfg, *args, train_tasks=train_tasks, **kwargs)
    monkeypatch.setattr(Trainer, "__init__", spy)
    return drawn


def test_rerun_keeps_finished_runs_adds_missing_ones_and_refuses_other_settings(
        tmp_path, capsys, keep_torch_threads):
    out = ["--out", str(tmp_path), "--resume"]
    train_table.main(out + TINY + ["--estimators", "grpo"])
    first = json.loads((tmp_path / "results.json").read_text())
    assert [(r["estimator"], r["seed"]) for r in first] == [("grpo", 0)]
    assert "| grpo seed 0 | " in capsys.readouterr().out     # the table ends with its report
    assert first[0]["sft_s"] > 0        # the warm start's own time, recorded beside it

    with pytest.raises(SystemExit):      # a rerun without --resume would mix two tables: refused
        train_table.main(["--out", str(tmp_path)] + TINY + ["--estimators", "grpo", "gigpo"])
    assert "is not empty" in capsys.readouterr().err
    train_table.main(out + TINY + ["--estimators", "grpo", "gigpo"])
    second = json.loads((tmp_path / "results.json").read_text())
    assert second[0] == first[0]        # kept, not rerun
    assert [(r["estimator"], r["seed"]) for r in second] == [("grpo", 0), ("gigpo", 0)]
    assert second[1]["eval_before"] == first[0]["eval_before"] and second[1]["sft_s"] == first[0]["sft_s"]
    assert "grpo seed 0: kept" in capsys.readouterr().out

    with pytest.raises(SystemExit, match="other settings.*'lr': \\(0.0015, 0.001\\)"):
        train_table.main(out + TINY + ["--estimators", "bipace"] + sets("lr=1e-3"))
    assert json.loads((tmp_path / "results.json").read_text()) == second
    # settings left out are the table's own (tiny model, 1 iteration, ...), not the preset's
    train_table.main(out + ["--estimators", "grpo", "gigpo", "--seeds", "0"] + sets("threads=1"))
    assert "gigpo seed 0: kept" in capsys.readouterr().out
    assert json.loads((tmp_path / "results.json").read_text()) == second
    stored = json.loads((tmp_path / "table_settings.json").read_text())
    assert stored["preset"] == "textcraft-table" and stored["config"]["model"] == "tiny"
    run_config = json.loads((tmp_path / "grpo_seed0" / "config.json").read_text())
    assert run_config["preset_name"] == "textcraft-table"


def test_a_table_made_before_presets_continues_with_its_stored_flags(tmp_path, capsys, keep_torch_threads):
    """A folder whose table_settings.json holds train_table's old flags: mapped onto a TrainConfig, kept
    runs are kept, and a flag it never stored reads as the default that table ran with."""
    out = ["--out", str(tmp_path), "--resume"]
    train_table.main(out + TINY + ["--estimators", "grpo"] + sets("hidden_layer=0", "eps=0.05"))
    first = json.loads((tmp_path / "results.json").read_text())
    # the flags of commit 7e122c6 for TINY; depths and hidden_layer missing (added after it started)
    legacy = {"model": "tiny", "warm_start_seed": 0, "sft_steps": 2, "sft_lr": 1e-3, "sft_batch": 8,
              "sft_passes": 1, "sft_explore": 0.1, "sft_rename": 0.0, "rl_rename": 0.0, "lora_rank": 16,
              "rl_lora_layers": None, "iterations": 1, "batch_tasks": 2, "group_size": 2, "lr": 1.5e-3,
              "kl_coef": 0.0, "invalid_penalty": 0.0, "skip_zero_adv": True, "mini_batch_rows": 64,
              "ppo_epochs": 1, "drift_rows": 32, "max_steps": 2, "max_new_tokens": 4, "history_length": 6,
              "screen_repeats": 0, "min_ingredients": 1, "also_simpler": 0, "train_goals": None,
              "task_sampling": "uniform", "dynamic_sampling": False, "mode": None, "eval_every": 0,
              "eval_tasks": 2, "eval_repeats": 1, "temperature": 1.0, "eval_temperature": 0.4,
              "show_admissible": False}
    (tmp_path / "table_settings.json").write_text(json.dumps(legacy))
    train_table.main(out + ["--estimators", "grpo", "--seeds", "0"] + sets("threads=1"))
    assert "grpo seed 0: kept" in capsys.readouterr().out
    assert json.loads((tmp_path / "results.json").read_text()) == first
    stored = json.loads((tmp_path / "table_settings.json").read_text())
    assert json.loads((tmp_path / "table_settings.legacy.json").read_text()) == legacy
    config = stored["config"]
    # rl_lora_layers None: the top half of the warm start's 4 blocks; depths: the default before 2026-12-03
    assert config["lora_layers"] == 2 and json.loads(config["env_kwargs"])["depths"] == [1, 2]
    assert (config["hidden_layer"], config["lora_alpha"], config["eval_batch"]) == (0, 32, 2)
    from benchmarks.learning.table_settings import legacy_eval_width
    assert legacy_eval_width(0, [1]) == 27 and legacy_eval_width(0, [1, 2, 3]) == 77     # min(77, goals)
    assert legacy_eval_width(50, [1]) == 27 and legacy_eval_width(10, [1]) == 10
    assert stored["table"] == {"warm_start_seed": 0, "screen_repeats": 0, "min_ingredients": 1,
                               "also_simpler": 0, "train_goals": None}
    with pytest.raises(SystemExit, match="'env_kwargs': "):
        train_table.main(out + ["--estimators", "grpo", "--seeds", "0"]
                         + sets('env_kwargs={"preset": "agentgym", "depths": [1]}'))
    assert json.loads((tmp_path / "results.json").read_text()) == first


def test_depths_of_no_goals_are_refused_before_a_table_folder_is_made(tmp_path, capsys):
    with pytest.raises(SystemExit):
        depths_7 = 'env_kwargs={"preset": "agentgym", "depths": [7]}'
        train_table.main(["--out", str(tmp_path / "t")] + TINY + sets(depths_7))
    assert "settings: depths=(7,): goal depths run over [1, 2, 3, 4]" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_depths_choose_the_goals_of_warm_start_rl_and_evaluation(tmp_path, keep_torch_threads):
    from bipace_envs.textcraft.goals import goal_depths
    train_table.main(["--out", str(tmp_path)] + TINY + ["--estimators", "grpo"]
                     + sets('env_kwargs={"preset": "agentgym", "depths": [1]}'))
    depths = goal_depths()
    warm_eval = json.loads((tmp_path / "warm_start_eval.json").read_text())
    held_out = warm_eval["by_task"]
    assert held_out and {depths[g] for g in held_out} == {1}
    # the evaluation's kept chunks are summed into its time, then removed
    assert warm_eval["wall_s"] > 0 and not list(tmp_path.glob("*.chunks.jsonl"))
    rl = json.loads((tmp_path / "grpo_seed0" / "config.json").read_text())
    assert json.loads(rl["env_kwargs"])["depths"] == [1]
    # RL's LoRA: the config's lora_layers (the top 2 of the tiny model's 4 blocks); no SFT of its own
    n_blocks = json.loads((tmp_path / "warm_start" / "config.json").read_text())["num_hidden_layers"]
    assert rl["lora_layers"] == 2 < n_blocks and rl["sft_steps"] == 0


def test_a_run_stopped_after_a_checkpoint_continues_instead_of_restarting(tmp_path, keep_torch_threads):
    out = ["--out", str(tmp_path), "--resume"]
    train_table.main(out + TINY + ["--estimators", "grpo"])
    log = (tmp_path / "grpo_seed0" / "train.csv").read_text()
    assert (tmp_path / "grpo_seed0" / "checkpoints" / "latest").exists()
    (tmp_path / "results.json").unlink()          # as if the session ended before the run was recorded
    train_table.main(out + TINY + ["--estimators", "grpo"])
    assert (tmp_path / "grpo_seed0" / "train.csv").read_text() == log    # no iteration was redone
    assert [r["estimator"] for r in json.loads((tmp_path / "results.json").read_text())] == ["grpo"]


def test_screen_limits_rl_to_the_training_goals_the_warm_start_won(tmp_path, capsys, monkeypatch,
                                                                   keep_torch_threads):
    from agents.trainer import Trainer
    out = ["--out", str(tmp_path), "--resume"]
    screened = TINY[:-1] + ["1", "--min-ingredients", "1"]
    # the untrained tiny model wins no goal: the screen runs over every training goal, then says so
    with pytest.raises(SystemExit, match="won no training goal"):
        train_table.main(out + screened + ["--estimators", "grpo"])
    screen = json.loads((tmp_path / "screen.json").read_text())
    assert screen["eval_n"] == len(screen["by_task"]) > 100 and screen["eval_success"] == 0.0
    # as if the warm start had won two goals (one of them on one episode of two)
    goals = sorted(screen["by_task"])[:3]
    screen["by_task"] = {g: [0, 1] for g in screen["by_task"]}
    screen["by_task"][goals[0]], screen["by_task"][goals[2]] = [1, 1], [1, 2]
    (tmp_path / "screen.json").write_text(json.dumps(screen))
    seen = []
    real_init = Trainer.__init__

    def spy(self, cfg, *a, **kw):
        real_init(self, cfg, *a, **kw)
        seen.append((cfg.out_dir, list(self.train_tasks)))
    monkeypatch.setattr(Trainer, "__init__", spy)
    train_table.main(out + screened + ["--estimators", "grpo"])
    rl_runs = [tasks for where, tasks in seen if where.endswith("grpo_seed0")]
    assert [[str(t) for t in tasks] for tasks in rl_runs] == [[goals[0], goals[2]]]
    assert "won 2 of" in capsys.readouterr().out
    # the goals RL sampled are kept for goal_probe.py --goal-list
    assert sorted((tmp_path / "rl_goals.txt").read_text().split()) == [goals[0], goals[2]]


WARM_GOALS = {"a": [0, 4], "b": [4, 4], "c": [0, 4], "d": [0, 4]}
RUN_GOALS = {0: {"a": [4, 4], "b": [4, 4], "c": [0, 4], "d": [0, 4]},
             1: {"a": [4, 4], "b": [4, 4], "c": [2, 4], "d": [0, 4]}}


def _write_table_folder(root, per_goal: bool, with_zero_shot: bool):
    warm = {"eval_success": 0.25, "eval_n": 16} | ({"by_task": WARM_GOALS} if per_goal else {})
    (root / "warm_start_eval.json").write_text(json.dumps(warm))
    (root / "warm_start_s.json").write_text(json.dumps({"sft_s": 600.0}))
    if with_zero_shot:
        (root / "zero_shot.json").write_text(json.dumps({"eval_success": 0.0, "eval_n": 16}))
    rows = [dict(estimator="grpo", seed=s, eval_after=p, train_first=0.5, train_last=0.75, rl_s=1200.0)
            for s, p in ((0, 0.5), (1, 0.625))]
    (root / "results.json").write_text(json.dumps(rows))
    for name, wins in (("grpo_seed0", [0.5, 0.75]), ("grpo_seed1", [0.25, 1.0]), ("bipace_seed0", [0.5])):
        (root / name).mkdir()
        (root / name / "train.csv").write_text("iteration,success\n" + "".join(
            f"{i + 1},{w}\n" for i, w in enumerate(wins)))
    for seed, by_task in RUN_GOALS.items():
        (root / f"grpo_seed{seed}" / "eval_by_task.jsonl").write_text(
            json.dumps({"iteration": 2, "by_task": by_task}) + "\n")


def _report_rows(root, capsys) -> dict:
    train_table.main(["--out", str(root), "--report", "--estimators", "grpo", "bipace",
                      "--seeds", "0", "1", "--set", "iterations=2"])
    text = capsys.readouterr().out
    assert (root / "table.md").read_text().strip() in text and (root / "table.png").stat().st_size > 0
    main_table = text.split("Held-out success by goal depth")[0]
    return {line.split(" | ")[0].strip("| *"): line
            for line in main_table.splitlines() if line.startswith("| ")}


def _t_half(values) -> float:
    """95% t-interval half-width of a mean of 4 values (t_0.975 with 3 degrees of freedom = 3.182)."""
    return 3.182 * np.std(values, ddof=1) / 2


@pytest.mark.parametrize("with_zero_shot", [True, False])
def test_report_reads_a_partial_table_without_running_anything(tmp_path, capsys, with_zero_shot):
    _write_table_folder(tmp_path, per_goal=True, with_zero_shot=with_zero_shot)
    rows = _report_rows(tmp_path, capsys)
    warm = np.array([w / n for w, n in WARM_GOALS.values()])
    after = {s: np.array([w / n for w, n in g.values()]) for s, g in RUN_GOALS.items()}
    # each goal is its own control: the change is the mean per-goal difference, with a t-interval over goals
    assert f"+0.250 ± {_t_half(after[0] - warm):.3f} (paired; goals up 1, down 0)" in rows["grpo seed 0"]
    assert f"0.500 ± 0.245 (n=16) | ± {_t_half(after[0]):.3f} (4 goals)" in rows["grpo seed 0"]
    assert f"+0.375 ± {_t_half(after[1] - warm):.3f} (paired; goals up 2, down 0)" in rows["grpo seed 1"]
    # two seeds pool their episodes goal by goal
    pooled = (after[0] + after[1]) / 2
    assert f"0.562 ± 0.172 (n=32) | ± {_t_half(pooled):.3f} (4 goals)" in rows["grpo, 2 seeds pooled"]
    assert f"+0.312 ± {_t_half(pooled - warm):.3f} (paired;" in rows["grpo, 2 seeds pooled"]
    assert "stopped after 1 of 2 iterations" in rows["bipace seed 0"]
    assert "not run yet" in rows["bipace seed 1"] and "bipace, 2 seeds pooled" not in rows
    assert ("0.000 ± 0.000 (n=16)" in rows["zero-shot"]) == with_zero_shot
    assert not (tmp_path / "table_settings.json").exists()      # a report is not a run of the table


def test_report_reads_the_training_curve_ends_from_train_csv_without_overlap(tmp_path, capsys):
    from benchmarks.learning.table_report import curve_ends, curve_window
    assert [curve_window(n, 5) for n in (1, 2, 6, 10, 20)] == [1, 1, 3, 5, 5]
    assert curve_ends([0.2, 0.4, 0.6, 0.8, 1.0, 0.0], 3) == (pytest.approx(0.4), pytest.approx(0.6))
    _write_table_folder(tmp_path, per_goal=True, with_zero_shot=False)
    rows = _report_rows(tmp_path, capsys)       # 2 iterations: first and last 1, not 5
    assert "first -> last 1 it." in (tmp_path / "table.md").read_text()
    # from each run's train.csv (results.json says 0.5 -> 0.75 for both seeds)
    assert "| 0.500 -> 0.750 |" in rows["grpo seed 0"] and "| 0.250 -> 1.000 |" in rows["grpo seed 1"]
    assert "| 0.375 -> 0.875 |" in rows["grpo, 2 seeds pooled"]


def test_report_without_per_goal_wins_falls_back_to_the_unpaired_interval(tmp_path, capsys):
    _write_table_folder(tmp_path, per_goal=False, with_zero_shot=False)
    rows = _report_rows(tmp_path, capsys)
    half = 1.96 * np.sqrt(0.25 * 0.75 / 16 + 0.5 * 0.5 / 16)
    assert f"+0.250 ± {half:.3f} (unpaired)" in rows["grpo seed 0"]
    assert "| n/a |" in rows["warm start"]


def test_paired_change_counts_goals_up_and_down_and_refuses_other_goals():
    from benchmarks.learning.table_report import paired_change
    d, _, up, down = paired_change(WARM_GOALS, {"a": [1, 4], "b": [2, 4], "c": [0, 4], "d": [0, 4]})
    assert (d, up, down) == ((0.25 - 0.5) / 4, 1, 1)
    with pytest.raises(ValueError, match="different goals"):
        paired_change(WARM_GOALS, {"a": [1, 4]})
    d, half, up, down = paired_change({"a": [0, 4]}, {"a": [2, 4]})     # one goal: no interval
    assert (d, up, down) == (0.5, 1, 0) and np.isnan(half)


def test_report_splits_held_out_success_by_goal_depth(tmp_path):
    from benchmarks.learning.table_report import load_table, markdown
    _write_table_folder(tmp_path, per_goal=True, with_zero_shot=False)
    table = load_table(tmp_path, ["grpo"], [0, 1], 2)
    text = markdown(table, depths={"a": 1, "b": 1, "c": 2})       # "d" has no known depth
    by_depth = text.split("Held-out success by goal depth")[1]
    assert "| policy | depth 1 (2 goals) | depth 2 (1 goals) | depth ? (1 goals) |" in by_depth
    assert "| warm start | 0.500 (4/8) | 0.000 (0/4) | 0.000 (0/4) |" in by_depth
    # seed 1 gained goal a (depth 1: +1.0 and 0, mean +0.5, t-interval over 2 goals) and half of goal c
    half = 12.706 * np.std([1.0, 0.0], ddof=1) / np.sqrt(2)
    assert f"| grpo seed 1 | 1.000 (8/8), +0.500 ± {half:.3f} | 0.500 (2/4), +0.500 ± nan |" in by_depth
    assert "2 seeds pooled" not in by_depth          # runs only, each against the warm start
    assert "RL trained on" not in by_depth            # no screen in this folder
    (tmp_path / "screen.json").write_text(json.dumps({"by_task": {"a": [1, 1], "b": [0, 1], "c": [0, 1]}}))
    by_depth = markdown(load_table(tmp_path, ["grpo"], [0, 1], 2), depths={"a": 1, "b": 1, "c": 2})
    assert "the screen: 1 of 2 of depth 1, 0 of 1 of depth 2." in by_depth


def test_report_splits_held_out_success_by_recipe_shape_next_to_depth(tmp_path):
    from benchmarks.learning.table_report import load_table, markdown
    _write_table_folder(tmp_path, per_goal=True, with_zero_shot=False)
    (tmp_path / "screen.json").write_text(json.dumps({"by_task": {"a": [1, 1], "b": [0, 1], "c": [0, 1]}}))
    table = load_table(tmp_path, ["grpo"], [0, 1], 2)
    text = markdown(table, depths={"a": 1, "b": 1, "c": 2}, shapes={"a": 1, "b": 2, "c": 2, "d": 1})
    by_depth, by_shape = text.split("Held-out success by goal depth")[1].split(
        "Held-out success by recipe shape")
    assert "| policy | depth 1 (2 goals)" in by_depth and "ingredient" not in by_depth
    assert "| policy | 1 ingredient(s) (2 goals) | 2 ingredient(s) (2 goals) |" in by_shape
    assert "| warm start | 0.000 (0/8) | 0.500 (4/8) |" in by_shape
    # the screen's wins by shape: what RL practised (a won; b and c, the two-ingredient goals, lost)
    assert "the screen: 1 of 1 of 1 ingredient(s), 0 of 2 of 2 ingredient(s)." in by_shape
    assert "Held-out success by recipe shape" not in markdown(table, depths={"a": 1})


def test_train_goals_replace_the_screen_and_unknown_ones_are_refused(tmp_path, capsys, keep_torch_threads,
                                                                     rl_goals):
    bad = tmp_path / "bad.txt"
    bad.write_text("clock\nacacia_planks\n")        # acacia planks is a held-out goal
    with pytest.raises(SystemExit):
        train_table.main(["--out", str(tmp_path / "t")] + TINY + ["--train-goals", str(bad)])
    assert "not training goals of depths [1]: ['acacia_planks']" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()
    goals = tmp_path / "goals.txt"
    goals.write_text("# two training goals\nclock   # two ingredients\ngold_nugget\n\n")
    out = ["--out", str(tmp_path / "t"), "--resume"]
    train_table.main(out + TINY[:-2] + ["--screen-repeats", "1", "--estimators", "grpo",
                                        "--train-goals", str(goals)])
    assert rl_goals == [["clock", "gold_nugget"]]        # the RL run's goals; no screen was played
    assert sorted((tmp_path / "t" / "rl_goals.txt").read_text().split()) == ["clock", "gold_nugget"]
    assert not (tmp_path / "t" / "screen.json").exists()
    settings = json.loads((tmp_path / "t" / "table_settings.json").read_text())
    assert settings["table"]["train_goals"] == ["clock", "gold_nugget"]
    report = capsys.readouterr().out
    assert "RL trained on the goals of --train-goals: 2 of 2 of depth 1." in report
    assert "1 of 1 of 1 ingredient(s), 1 of 1 of 2 ingredient(s)." in report
    # once an RL run exists its goals are part of the table's settings
    goals.write_text("clock\n")
    kept_now = r"\{'train_goals': \(\['clock', 'gold_nugget'\], \['clock'\]\)\}"
    with pytest.raises(SystemExit, match=r"settings \(kept, now\): " + kept_now):
        train_table.main(out + TINY[:-2] + ["--screen-repeats", "1", "--estimators", "grpo",
                                            "--train-goals", str(goals)])


def test_train_goals_may_be_chosen_after_a_warm_start_only_table(tmp_path, keep_torch_threads):
    out = ["--out", str(tmp_path), "--resume"]
    train_table.main(out + TINY + ["--sft-only"])        # then probe it, then choose the RL goals
    goals = tmp_path / "goals.txt"
    goals.write_text("gold_nugget\n")
    train_table.main(out + TINY + ["--estimators", "grpo", "--train-goals", str(goals)])
    settings = json.loads((tmp_path / "table_settings.json").read_text())
    assert settings["table"]["train_goals"] == ["gold_nugget"]
    assert (tmp_path / "grpo_seed0" / "train.csv").exists()


def test_rl_settings_may_change_until_the_first_run_and_rl_lora_layers_adapts_the_top_blocks(
        tmp_path, monkeypatch, keep_torch_threads):
    from agents.trainer import Trainer
    adapted, sampling, layers, modes = [], [], [], []
    init = Trainer.__init__

    def spy(self, cfg, *args, **kwargs):
        init(self, cfg, *args, **kwargs)
        if cfg.out_dir.endswith("_seed0"):       # an RL run (the evaluations build trainers too)
            names = [n for n, p in self.model.named_parameters() if p.requires_grad]
            adapted.append(sorted({int(n.split(".layers.")[1].split(".")[0]) for n in names}))
            sampling.append(cfg.task_sampling)
            layers.append(self.collector("train").capture.layer)
            modes.append((self.mode, cfg.dynamic_sampling))
    monkeypatch.setattr(Trainer, "__init__", spy)
    out = ["--out", str(tmp_path), "--resume"]
    train_table.main(out + TINY + ["--sft-only"])
    warm = (tmp_path / "warm_start" / "config.json").stat().st_mtime_ns
    # the warm start is reused: RL's learning rate and LoRA blocks are not part of it
    train_table.main(out + TINY + ["--estimators", "grpo"] + sets(
        "lr=1e-3", "lora_layers=1", "task_sampling=mixed", "hidden_layer=-2", "mode=mean_norm",
        "dynamic_sampling=true"))
    assert (tmp_path / "warm_start" / "config.json").stat().st_mtime_ns == warm
    assert sampling == ["mixed"] and layers == [-2]     # the embedding BiGPO/BiPACE would get
    assert modes == [("mean_norm", True)]       # not grpo's own mean_std_norm
    n_blocks = json.loads((tmp_path / "warm_start" / "config.json").read_text())["num_hidden_layers"]
    assert adapted == [[n_blocks - 1]]        # the RL run's trainable tensors: the top block's only
    settings = json.loads((tmp_path / "table_settings.json").read_text())["config"]
    assert settings["lr"] == 1e-3 and settings["lora_layers"] == 1
    # once a run exists they are the table's settings: left out, they are kept; given, refused
    train_table.main(out + ["--estimators", "grpo", "--seeds", "0"])
    with pytest.raises(SystemExit) as refused:
        train_table.main(out + ["--estimators", "grpo", "--seeds", "0"] + sets(
            "lora_layers=2", "task_sampling=uniform", "hidden_layer=0", "mode=mean_std_norm"))
    for change in ("'lora_layers': (1, 2)", "'task_sampling': ('mixed', 'uniform')",
                   "'mode': ('mean_norm', 'mean_std_norm')", "'hidden_layer': (-2, 0)"):
        assert change in str(refused.value)
    # a setting of the warm start itself is refused even before any run
    other = ["--out", str(tmp_path / "w"), "--resume"] + TINY
    train_table.main(other + ["--sft-only"])
    with pytest.raises(SystemExit, match=r"'sft_lr': \(0.001, 0.0002\)"):
        train_table.main(other + ["--sft-only"] + sets("sft_lr=2e-4"))


def test_min_ingredients_keeps_the_screened_goals_of_that_recipe_shape(tmp_path, capsys, rl_goals,
                                                                       keep_torch_threads):
    out = ["--out", str(tmp_path), "--resume"]
    screened = TINY[:-1] + ["1", "--also-simpler", "0"]
    for args, why in ((screened + ["--min-ingredients", "0"], "must be >= 1"),
                      (TINY + ["--min-ingredients", "2"], "needs --screen-repeats >= 1")):
        with pytest.raises(SystemExit):
            train_table.main(out + args)
        assert why in capsys.readouterr().err
    train_table.main(out + screened + ["--sft-only"])
    # as if the warm start had won clock (2 ingredients) and gold nugget (1), and lost cake (4)
    by_task = {"clock": [1, 1], "gold_nugget": [1, 1], "cake": [0, 1]}
    (tmp_path / "screen.json").write_text(json.dumps({"eval_success": 2 / 3, "eval_n": 3, "wall_s": 1.0,
                                                      "by_task": by_task}))
    with pytest.raises(SystemExit, match=r"won no training goal of 3\+ ingredients"):
        train_table.main(out + screened + ["--estimators", "grpo", "--min-ingredients", "3"])
    train_table.main(out + screened + ["--estimators", "grpo", "--min-ingredients", "2"])
    assert rl_goals == [["clock"]]
    text = capsys.readouterr().out
    assert "won 2 of 3 training goals" in text and "RL samples the 1 of them of 2+ ingredients" in text
    assert "RL trained on the training goals of 2+ ingredients the warm start won in the screen" in text


def test_also_simpler_adds_a_fixed_draw_of_won_single_recipe_goals_of_fewer_ingredients():
    from agents.goal_screen import screen_choice
    # won: clock (2 ingredients), cake (4), gold nugget, bread, oak planks (1, one recipe each), white dye
    # (1, two recipes); lost: iron nugget (1)
    by_task = {"clock": [1, 1], "cake": [1, 1], "gold_nugget": [1, 1], "bread": [2, 2], "oak_planks": [1, 2],
               "white_dye": [1, 1], "iron_nugget": [0, 1]}
    assert screen_choice(by_task, 2) == {"clock", "cake"}
    two = screen_choice(by_task, 2, also_simpler=2)
    assert {"clock", "cake"} < two and len(two) == 4
    assert two - {"clock", "cake"} < {"gold_nugget", "bread", "oak_planks"}     # never white dye or a loss
    assert screen_choice(by_task, 2, also_simpler=2) == two                     # the same draw every time
    every_won = {"clock", "cake", "gold_nugget", "bread", "oak_planks", "white_dye"}
    assert screen_choice(by_task, 2, also_simpler=9) == every_won - {"white_dye"}
    assert screen_choice(by_task, 3, also_simpler=9) == every_won - {"white_dye"}    # clock is simpler too
    assert screen_choice(by_task, 1, also_simpler=2) == every_won         # nothing has fewer than 1


def test_also_simpler_needs_a_min_ingredients_to_be_simpler_than(tmp_path, capsys):
    for extra in (["--min-ingredients", "1", "--also-simpler", "2"], ["--also-simpler", "-1"]):
        with pytest.raises(SystemExit):
            train_table.main(["--out", str(tmp_path)] + TINY[:-1] + ["1"] + extra)
        assert "--also-simpler" in capsys.readouterr().err
    assert not (tmp_path / "table_settings.json").exists()


def test_rl_goals_default_to_the_screens_multi_ingredient_goals_and_8_simpler_ones(tmp_path,
                                                                                   keep_torch_threads):
    for screen, expected in (("1", (2, 8)), ("0", (1, 0))):     # without a screen nothing to filter
        out = tmp_path / f"screen{screen}"
        train_table.main(["--out", str(out)] + TINY[:-1] + [screen, "--sft-only"])
        settings = json.loads((out / "table_settings.json").read_text())["table"]
        assert (settings["min_ingredients"], settings["also_simpler"]) == expected


def test_textcraft_shapes_count_the_ingredients_of_the_simplest_recipe():
    from bipace_envs.textcraft.goals import goal_ingredients
    shapes = goal_ingredients()
    # craft 4 acacia planks using 1 acacia logs; craft 4 coarse dirt using 2 dirt, 2 gravel
    assert shapes["acacia_planks"] == shapes["acacia planks"] == shapes["minecraft:acacia_planks"] == 1
    assert shapes["coarse_dirt"] == 2
    assert shapes["white_dye"] == 1       # two recipes (lily of the valley, bone meal), one ingredient each


def test_textcraft_depths_know_the_goals_under_the_names_evaluations_record():
    from bipace_envs.textcraft.goals import goal_depths
    depths = goal_depths()
    assert depths["acacia_planks"] == depths["acacia planks"] == depths["minecraft:acacia_planks"] == 1
    assert depths["oak_fence"] == 2


def test_report_without_a_warm_start_says_what_to_run(tmp_path, capsys):
    out = tmp_path / "never_run"
    train_table.main(["--out", str(out), "--report"])
    assert f"no warm-start evaluation yet (run python -m benchmarks.learning.train_table --out {out}" in (
        capsys.readouterr().out)
    assert not out.exists()
