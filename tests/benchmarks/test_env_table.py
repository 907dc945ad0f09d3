"""benchmarks/env_table.py: every stage of the ALFWorld/WebShop table runs, is kept, and continues."""
import json

import pytest

from benchmarks import env_table
from benchmarks.env_table_report import paired_change, wilson95


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


# webshop-table on the tiny model: 2 SFT steps, 1 RL iteration of 2 goals x G=2, 3 held-out test goals and
# the fixture's 5 goals x 8, 2 steps of 6 tokens; seconds a stage
TINY = sets("model=tiny", "sft_steps=2", "sft_episodes=4", "iterations=1", "batch_tasks=2", "group_size=2",
            "eval_tasks=3", "eval_batch=4", "max_steps=2", "history_length=2", "max_new_tokens=6",
            "threads=1", "lora_layers=2") + ["--seeds", "0", "--estimators", "gigpo", "--screen-tasks", "4"]


@pytest.fixture
def keep_torch_threads():
    import torch
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_webshop_table_runs_every_stage_keeps_them_and_refuses_other_settings(
        tmp_path, capsys, keep_torch_threads, monkeypatch):
    out = ["--out", str(tmp_path)]
    # the tiny warm start wins nothing: the screen would stop the table, so RL samples every screened task
    env_table.main(out + ["--preset", "webshop-table"] + TINY + ["--screen-repeats", "0"])
    text = (tmp_path / "table.md").read_text()
    for row in ("| warm_start |", "| zero_shot |", "| gigpo_seed0 |"):
        assert row in text
    assert "## Held out: test" in text and "## Held out: fixture" in text
    fixture = json.loads((tmp_path / "evals" / "warm_start__fixture.json").read_text())
    assert fixture["eval_n"] == 3 * 8           # eval_tasks=3 of the fixture's 5 goals x its 8 repeats
    test = json.loads((tmp_path / "evals" / "gigpo_seed0__test.json").read_text())
    assert test["eval_n"] == 3 and len(test["episodes"]["scores"]) == 3
    assert 0.0 <= test["eval_inadmissible"] <= 1.0
    assert (tmp_path / "gigpo_seed0" / "adapter").is_dir()
    assert (tmp_path / "curves.png").exists()

    # a rerun plays nothing again: every stage is kept
    from agents.trainer import Trainer

    def refuse(*a, **k):
        raise AssertionError("a kept stage ran again")
    monkeypatch.setattr(Trainer, "evaluate", refuse)
    monkeypatch.setattr(Trainer, "train", refuse)
    env_table.main(out + ["--screen-repeats", "0", "--seeds", "0", "--estimators", "gigpo"])
    assert "| gigpo_seed0 |" in capsys.readouterr().out

    with pytest.raises(SystemExit):
        env_table.main(out + sets("lr=1e-4"))
    assert "measured with other settings" in capsys.readouterr().err


def test_settings_errors_name_the_problem(tmp_path, capsys):
    with pytest.raises(SystemExit):
        env_table.main(["--out", str(tmp_path), "--preset", "textcraft-table"])
    assert "has no held-out sets" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        env_table.main(["--out", str(tmp_path), "--preset", "webshop-table", "--set", "nonsense=1"])
    assert "--set expects FIELD=VALUE" in capsys.readouterr().err


def test_alfworld_held_out_sets_are_the_real_games_grouped_by_task_type():
    spec = env_table.TABLES["alfworld-table"]
    assert [h.split for h in spec.held_out] == ["valid_seen", "valid_unseen"]
    assert spec.group_of("valid_seen/pick_two_obj_and_place-Box-None-CoffeeTable-207/trial_T1") == \
        "pick_two_obj_and_place"
    assert spec.group_of("gen/train/look_at_obj_in_light/00003") == "look_at_obj_in_light"
    from agents.presets import get_preset
    cfg = get_preset("alfworld-table")
    fields = env_table.eval_fields(cfg, spec.held_out[1])
    assert fields["eval_split"] == "valid_unseen"
    assert json.loads(fields["eval_env_kwargs"])["games_per_task"] == 10
    assert env_table.eval_fields(cfg, None)["eval_env_kwargs"] == "{}"      # the screen plays training games


def test_report_statistics():
    lo, hi = wilson95(0, 20)
    assert lo == 0.0 and 0.1 < hi < 0.2          # an interval above 0 even with no success
    lo, hi = wilson95(10, 20)
    assert lo < 0.5 < hi and abs((lo + hi) / 2 - 0.5) < 1e-9
    base = {"episodes": {"tasks": ["a", "b", "c", "d"], "won": [0, 0, 1, 0]}}
    other = {"episodes": {"tasks": ["a", "b", "c", "d"], "won": [1, 0, 1, 1]}}
    mean, half = paired_change(base, other)
    assert mean == pytest.approx(0.5) and half > 0
    assert paired_change(base, {"episodes": {"tasks": ["x"], "won": [1]}}) is None
