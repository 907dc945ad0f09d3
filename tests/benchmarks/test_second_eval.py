"""benchmarks/learning/second_eval.py: a table's result against a second evaluation on other episodes."""
import json

import pytest

from benchmarks.learning import second_eval


def seen(wins: dict) -> dict:
    return {g: {"won": w, "lost": None} for g, w in wins.items()}


def write_table(folder, warm: dict, runs: dict) -> None:
    folder.mkdir()
    (folder / "warm_start_eval.json").write_text(json.dumps({"by_task": warm}))
    for name, by_task in runs.items():
        (folder / name).mkdir()
        (folder / name / "eval_by_task.jsonl").write_text(json.dumps({"iteration": 10, "by_task": by_task}))


def test_rows_compare_each_run_with_the_warm_start_in_each_evaluation_and_both(tmp_path, capsys):
    write_table(tmp_path / "t", {"a": [0, 4], "b": [4, 4]}, {"grpo_seed0": {"a": [4, 4], "b": [4, 4]}})
    second = tmp_path / "s"
    second.mkdir()
    # the warm start and grpo after 10 iterations, then gigpo's final policy without checkpoints
    (second / "grpo_seed0.json").write_text(json.dumps({
        "0": seen({"a": [False] * 4, "b": [True, True, True, False]}),
        "10": seen({"a": [True, False, False, False], "b": [True] * 4})}))
    (second / "gigpo_seed0.json").write_text(json.dumps(seen({"a": [True] * 4, "b": [True] * 4})))
    warm, runs = second_eval.read_second(second)
    assert warm == {"a": [0, 4], "b": [3, 4]}
    assert runs == {"grpo_seed0": {"a": [1, 4], "b": [4, 4]}, "gigpo_seed0": {"a": [4, 4], "b": [4, 4]}}
    with pytest.raises(ValueError, match="gigpo_seed0"):      # the table has no gigpo run to compare with
        second_eval.rows(tmp_path / "t", {"a": [0, 4], "b": [4, 4]}, warm, runs)
    (second / "gigpo_seed0.json").unlink()
    second_eval.main(["--table", str(tmp_path / "t"), "--second", str(second)])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| grpo seed 0"))
    _, table, second_cell, both = row.strip("| ").split(" | ")
    # table: 50% -> 100% (+50 per goal: a +100, b 0); second: 37.5% -> 62.5% (a +25, b +25)
    assert table.startswith("**100.0%") and "+50.0 ±" in table and "(1 up, 0 down)" in table
    assert second_cell.startswith("62.5%") and "+25.0 ± 0.0 (2 up, 0 down)" in second_cell
    # both: 7/16 -> 13/16 = 81.2%; a 0/8 -> 5/8, b 7/8 -> 8/8
    assert both.startswith("**81.2%") and "(n=16)" in both and "(2 up, 0 down)" in both
    assert "warm start: table's evaluation: 50.0%" in out


def test_a_second_evaluation_of_other_goals_or_without_the_warm_start_is_refused(tmp_path, capsys):
    write_table(tmp_path / "t", {"a": [0, 4], "b": [4, 4]}, {"grpo_seed0": {"a": [4, 4], "b": [4, 4]}})
    second = tmp_path / "s"
    second.mkdir()
    (second / "grpo_seed0.json").write_text(json.dumps(seen({"a": [True] * 4, "b": [True] * 4})))
    args = ["--table", str(tmp_path / "t"), "--second", str(second)]
    with pytest.raises(SystemExit):
        second_eval.main(args)          # no file holds iteration 0
    assert "no file holds the warm start" in capsys.readouterr().err
    one_goal = seen({"a": [True] * 4})
    (second / "grpo_seed0.json").write_text(json.dumps({"0": one_goal, "10": one_goal}))
    with pytest.raises(SystemExit):
        second_eval.main(args)          # one goal against the table's two
    assert "played 1 goals, the table 2" in capsys.readouterr().err
