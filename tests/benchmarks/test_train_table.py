"""benchmarks/train_table.py: a table continues where it stopped, and refuses to mix settings."""
import json

import pytest

from benchmarks import train_table

TINY = ["--model", "tiny", "--sft-steps", "2", "--iterations", "1", "--batch-tasks", "2", "--group-size", "2",
        "--eval-tasks", "2",
        "--eval-repeats", "1", "--max-steps", "2", "--max-new-tokens", "4", "--threads", "1", "--seeds", "0",
        "--screen-repeats", "0"]


@pytest.fixture
def keep_torch_threads():
    import torch
    n = torch.get_num_threads()     # main() sets the process-wide thread count; later tests keep theirs
    yield
    torch.set_num_threads(n)


def test_rerun_keeps_finished_runs_adds_missing_ones_and_refuses_other_settings(
        tmp_path, capsys, keep_torch_threads):
    out = ["--out", str(tmp_path)]
    train_table.main(out + TINY + ["--estimators", "grpo"])
    first = json.loads((tmp_path / "results.json").read_text())
    assert [(r["estimator"], r["seed"]) for r in first] == [("grpo", 0)]
    assert first[0]["sft_s"] > 0        # the warm start's own time, recorded beside it

    train_table.main(out + TINY + ["--estimators", "grpo", "gigpo"])
    second = json.loads((tmp_path / "results.json").read_text())
    assert second[0] == first[0]        # kept, not rerun
    assert [(r["estimator"], r["seed"]) for r in second] == [("grpo", 0), ("gigpo", 0)]
    assert second[1]["eval_before"] == first[0]["eval_before"] and second[1]["sft_s"] == first[0]["sft_s"]
    assert "grpo seed 0: kept" in capsys.readouterr().out

    with pytest.raises(SystemExit, match="other settings.*'lr': \\(0.0005, 0.001\\)"):
        train_table.main(out + TINY + ["--estimators", "bipace", "--lr", "1e-3"])
    assert json.loads((tmp_path / "results.json").read_text()) == second


def test_a_run_stopped_after_a_checkpoint_continues_instead_of_restarting(tmp_path, keep_torch_threads):
    out = ["--out", str(tmp_path)]
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
    out = ["--out", str(tmp_path)]
    screened = TINY[:-1] + ["1"]
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
