"""benchmarks/learning/goal_probe.py: per-goal wins of a policy, by recipe shape, with a lost episode."""
import json

import pytest

from benchmarks.learning import goal_probe
from bipace_envs.textcraft.goals import goal_ingredients

TINY = ["--model", "tiny", "--max-steps", "2", "--max-new-tokens", "4", "--threads", "1", "--batch", "3"]


@pytest.fixture
def keep_torch_threads():
    import torch
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_report_counts_mixed_and_never_won_goals_by_shape():
    seen = {"a": {"won": [True, False], "lost": ["get 1 x", "get 1 x"]},
            "b": {"won": [False, False], "lost": ["get 2 y"]},
            "c": {"won": [True, True], "lost": None},
            "d": {"won": [False, True], "lost": ["craft 1 d using 1 z"]}}
    text = goal_probe.report(seen, {"a": 1, "b": 2, "c": 2, "d": 2}, repeats=2, show=200)
    assert "  1 ingredient(s):   1 goals, success 0.500 (1/2), mixed 1, never won 0" in text
    assert "  2 ingredient(s):   3 goals, success 0.500 (3/6), mixed 1, never won 1" in text
    lines = text.splitlines()
    assert lines[1].split()[:3] == ["a", "1", "1"] and lines[1].endswith("get 1 x | get 1 x")
    assert lines[3].split() == ["c", "2", "2"]           # never lost: no actions shown
    short = goal_probe.report(seen, {"a": 1, "b": 2, "c": 2, "d": 2}, repeats=2, show=1)
    assert "\nb " not in short and "mixed 1, never won 1" in short   # goal lines cut, summary kept
    assert "... 3 more goals (--show)" in short
    summary = goal_probe.report(seen, {"a": 1, "b": 2, "c": 2, "d": 2}, repeats=2, show=0)
    assert summary.startswith("by recipe shape:") and "mixed 1, never won 1" in summary


def test_probe_plays_the_repeats_of_goals_of_the_chosen_shape(tmp_path, capsys, keep_torch_threads):
    out = tmp_path / "seen.json"
    goal_probe.main(TINY + ["--split", "test", "--min-ingredients", "2", "--goals", "2", "--repeats", "2",
                            "--out", str(tmp_path / "scratch"), "--json", str(out)])
    seen, shapes = json.loads(out.read_text()), goal_ingredients()
    assert len(seen) == 2 and all(shapes[g] >= 2 for g in seen)
    for rec in seen.values():
        assert len(rec["won"]) == 2
        if not all(rec["won"]):
            assert 1 <= len(rec["lost"]) <= 2         # a lost episode ran to max_steps
    assert "2 ingredient(s):   2 goals" in capsys.readouterr().out
    played = json.loads((tmp_path / "scratch" / "config.json").read_text())
    assert played["show_admissible"] is False and played["max_steps"] == 2    # train_table's prompts


def test_a_shape_no_goal_has_is_refused_with_what_to_change(tmp_path, keep_torch_threads):
    with pytest.raises(SystemExit, match="has 9-9 ingredients; widen --min/--max-ingredients"):
        goal_probe.main(TINY + ["--min-ingredients", "9", "--out", str(tmp_path)])


def _lora_tiny(top_layers: int):
    from agents.models import LoraSettings, add_lora, load_policy
    model, _ = load_policy("tiny")
    return add_lora(model, LoraSettings(rank=4, alpha=8, top_layers=top_layers))


def test_a_runs_trained_adapter_is_loaded_into_a_fresh_policy_of_its_shape(tmp_path):
    import torch
    run = tmp_path / "grpo_seed0"
    trained = _lora_tiny(top_layers=1)
    with torch.no_grad():
        for name, p in trained.named_parameters():
            if "lora_B" in name:
                p.normal_()                       # fresh LoRA B is zero: make the adapter do something
    trained.save_pretrained(run / "adapter")
    (run / "config.json").write_text(json.dumps({"model": "tiny", "lora_rank": 4, "lora_alpha": 8,
                                                 "lora_mlp": False, "lora_layers": 1, "env": "textcraft"}))
    from agents.runs import load_run_adapter, run_policy
    assert run_policy(run) == ("tiny", {"lora_rank": 4, "lora_alpha": 8, "lora_mlp": False,
                                        "lora_layers": 1})
    fresh = _lora_tiny(top_layers=1)
    lora_b = {n: p for n, p in fresh.named_parameters() if "lora_B" in n}
    assert lora_b and all(float(p.detach().abs().sum()) == 0 for p in lora_b.values())
    load_run_adapter(fresh, run)
    want = dict(trained.named_parameters())
    for name, p in lora_b.items():
        assert torch.equal(p, want[name])
    everywhere = tmp_path / "all_layers"
    _lora_tiny(top_layers=0).save_pretrained(everywhere / "adapter")
    with pytest.raises(ValueError, match="adapter has weights this model lacks"):
        load_run_adapter(_lora_tiny(top_layers=1), everywhere)    # LoRA on fewer blocks


def test_run_without_an_adapter_is_refused_with_what_to_pass(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(SystemExit, match=r"adapter_model.safetensors; pass the folder of a finished"):
        goal_probe.main(["--run", str(tmp_path)])
    with pytest.raises(SystemExit):
        goal_probe.main(["--run", str(tmp_path), "--model", "tiny"])      # exactly one of the two


def test_a_run_is_played_with_its_own_prompt_and_episode_settings(tmp_path):
    import argparse
    (tmp_path / "config.json").write_text(json.dumps({
        "model": "tiny", "max_steps": 4, "history_length": 3, "max_new_tokens": 20, "show_admissible": True,
        "history_chars": 90, "require_think": "auto", "compact_prompts": "no",
        "env_kwargs": json.dumps({"preset": "agentgym", "depths": [1, 2]})}))
    ap = argparse.ArgumentParser()
    for flag, default in (("--max-steps", 6), ("--history-length", 6), ("--max-new-tokens", 32)):
        ap.add_argument(flag, type=int, default=default)
    ap.add_argument("--depths", type=int, nargs="+", default=[1])
    ap.add_argument("--show-admissible", action=argparse.BooleanOptionalAction, default=False)
    args = ap.parse_args([])
    args.run = tmp_path
    goal_probe.use_run_settings(args, ap)
    assert (args.max_steps, args.history_length, args.max_new_tokens, args.show_admissible, args.depths) == \
        (4, 3, 20, True, [1, 2])
    # the run's pinned prompt settings too ("auto" stays the probe's own: a run's model may be a folder)
    assert args.run_prompts == {"history_chars": 90, "compact_prompts": "no"}
    clash = ap.parse_args(["--max-steps", "8"])
    clash.run = tmp_path
    with pytest.raises(SystemExit):
        goal_probe.use_run_settings(clash, ap)           # --max-steps 8 against the run's 4
    agree = ap.parse_args(["--max-steps", "4"])
    agree.run = tmp_path
    goal_probe.use_run_settings(agree, ap)
    assert agree.max_steps == 4


def _tiny_run_with_checkpoints(run, iterations):
    """A tiny run folder as train_table leaves it: config.json, a LoRA saved after each iteration (B drawn
    at random so each one plays differently) and the final adapter."""
    import torch
    for it in iterations:
        saved = _lora_tiny(top_layers=1)
        torch.manual_seed(it)
        with torch.no_grad():
            for name, p in saved.named_parameters():
                if "lora_B" in name:
                    p.normal_(std=5.0)
        saved.save_pretrained(run / "checkpoints" / f"iter_{it:06d}" / "adapter")
    saved.save_pretrained(run / "adapter")
    (run / "config.json").write_text(json.dumps({
        "model": "tiny", "lora_rank": 4, "lora_alpha": 8, "lora_mlp": False, "lora_layers": 1, "max_steps": 2,
        "max_new_tokens": 4, "env_kwargs": json.dumps({"preset": "agentgym", "depths": [1]})}))


def test_checkpoints_play_each_saved_iteration_on_the_same_goals_and_seeds(
        tmp_path, capsys, keep_torch_threads):
    run, goals = tmp_path / "grpo_seed0", tmp_path / "rl_goals.txt"
    _tiny_run_with_checkpoints(run, [1, 2])
    goals.write_text("oak_planks\nbirch_planks   # the table's RL goals\n")
    common = ["--goal-list", str(goals), "--repeats", "2", "--threads", "1", "--batch", "2"]
    curve = tmp_path / "curve.json"
    goal_probe.main(["--run", str(run), "--checkpoints", "2", "0", "1", "--out", str(tmp_path / "a"),
                     "--json", str(curve)] + common)
    seen_at = json.loads(curve.read_text())
    assert list(seen_at) == ["0", "1", "2"]
    assert all(sorted(seen) == ["birch_planks", "oak_planks"] for seen in seen_at.values())
    out = capsys.readouterr().out
    assert "change vs iteration 0" in out and "(2 goals: up 0, down 0)" in out
    # iteration 0 is the run's policy before any update: the base model, played with the same seeds
    base = tmp_path / "base.json"
    goal_probe.main(["--model", "tiny", "--max-steps", "2", "--max-new-tokens", "4",
                     "--out", str(tmp_path / "b"), "--json", str(base)] + common)
    assert json.loads(base.read_text()) == seen_at["0"]
    # each checkpoint's own weights were played: their lost episodes differ from the base's
    assert seen_at["1"] != seen_at["0"] and seen_at["2"] != seen_at["1"]


def test_a_checkpoint_the_run_did_not_save_or_an_unknown_goal_is_refused(tmp_path, keep_torch_threads):
    run = tmp_path / "grpo_seed0"
    _tiny_run_with_checkpoints(run, [1, 2])
    with pytest.raises(SystemExit, match=r"saved no adapter after iteration 5 \(saved after: \[1, 2\]\)"):
        goal_probe.main(["--run", str(run), "--checkpoints", "0", "5"])
    with pytest.raises(SystemExit):
        goal_probe.main(["--model", "tiny", "--checkpoints", "1"])        # a checkpoint needs its run
    with pytest.raises(SystemExit):
        goal_probe.main(["--run", str(run), "--checkpoints", "1", "--mixed-out", str(tmp_path / "m.txt")])
    goals = tmp_path / "goals.txt"
    goals.write_text("oak_planks\nacacia_planks\n")        # acacia planks is a held-out goal
    with pytest.raises(SystemExit, match=r"not train goals of depths \[1\]: \['acacia_planks'\]"):
        goal_probe.main(TINY + ["--goal-list", str(goals), "--out", str(tmp_path / "s")])


def test_curve_report_pairs_each_iteration_with_the_first_over_goals():
    def seen(wins):
        return {g: {"won": w, "lost": None} for g, w in wins.items()}
    seen_at = {0: seen({"a": [False, False], "b": [True, False], "c": [True, True]}),
               3: seen({"a": [True, True], "b": [True, False], "c": [True, False]})}
    lines = goal_probe.curve_report(seen_at).splitlines()
    assert lines[1].split()[:2] == ["0", "0.500"] and "(n=6)" in lines[1]
    assert lines[2].split()[:2] == ["3", "0.667"]
    # per goal: a +1, b 0, c -0.5: mean +0.167, one goal up, one down
    assert "+0.167" in lines[2] and "(3 goals: up 1, down 1)" in lines[2]
