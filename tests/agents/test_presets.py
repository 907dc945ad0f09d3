"""agents/presets.py and bipace-train --preset: named, complete settings; flags and --set override them;
a run records its preset and every field."""
from __future__ import annotations

import dataclasses
import json

import pytest

from agents.config import TrainConfig
from agents.presets import ALIASES, PRESETS, config_from_args, get_preset, parse_sets


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_a_documented_valid_train_config(name):
    from estimators import available_estimators
    preset = PRESETS[name]
    cfg = preset.config()
    assert isinstance(cfg, TrainConfig) and cfg.preset_name == name
    cfg.env_kwargs_dict(), cfg.estimator_options_dict(), cfg.episode_minibatches()
    assert len(preset.doc) > 150, "a preset's docstring says what it is for and where its numbers come from"
    assert set(preset.estimators) <= set(available_estimators()) and preset.seeds


def test_the_four_settings_the_project_reports_are_presets():
    table, paper = get_preset("textcraft-table"), get_preset("qwen1.5b-alfworld")
    assert (table.model, table.batch_tasks, table.group_size, table.lr, table.iterations) == (
        "smollm2-135m", 8, 6, 1.5e-3, 10)
    assert (paper.env, paper.batch_tasks, paper.group_size, paper.resolved_eps()) == ("alfworld", 16, 8, 0.05)
    assert paper.bigpo_setting == "paper" and paper.resolved_hidden_layer() is None
    assert get_preset("compare").model == "smollm2-135m" and get_preset("smoke").model == "tiny"
    for old, new in ALIASES.items():        # bipace-compare's former preset names
        assert get_preset(old) == get_preset(new)


def test_flags_given_override_the_preset_and_set_comes_last():
    cfg = config_from_args(["--preset", "textcraft-table", "--iterations", "3", "--set", "lr=1e-3",
                            "--set", "mode=mean_norm"])
    want = dataclasses.replace(get_preset("textcraft-table"), iterations=3, lr=1e-3, mode="mean_norm")
    assert cfg == want
    # a flag equal to TrainConfig's default still overrides the preset (the preset is the default now)
    assert config_from_args(["--preset", "textcraft-table", "--batch-tasks", "16"]).batch_tasks == 16
    assert config_from_args(["--iterations", "3"]) == dataclasses.replace(TrainConfig(), iterations=3)


def test_bad_presets_and_sets_are_refused_with_what_to_do(capsys):
    from agents.cli import main
    assert main(["--preset", "nope"]) == 2
    assert "unknown preset 'nope'; presets: " in capsys.readouterr().err
    assert main(["--preset", "smoke", "--set", "batch_tasks=many"]) == 2
    assert "--set batch_tasks: expected int, got 'many'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="TrainConfig field"):
        parse_sets(["no_such_field=1"])
    assert parse_sets(["progress=no", "mode=none", "env_kwargs={\"a\": 1}"]) == {
        "progress": False, "mode": None, "env_kwargs": "{\"a\": 1}"}


def test_a_run_records_its_preset_and_every_field(tmp_path, monkeypatch):
    import torch
    from agents.cli import main
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    try:
        assert main(["--preset", "smoke", "--out-dir", "run", "--set", "iterations=1"]) == 0
    finally:
        torch.set_num_threads(threads)
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert stored == dataclasses.asdict(get_preset("smoke", ["iterations=1", "out_dir=run"]))
    from agents.runs import load_run_config, load_run_policy
    assert load_run_config(tmp_path / "run") == get_preset("smoke", ["iterations=1", "out_dir=run"])
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["preset"] == "smoke"
    model, _ = load_run_policy(tmp_path / "run")         # the base policy with the run's final adapter
    after_1, _ = load_run_policy(tmp_path / "run", iteration=1)     # its checkpoint of the last iteration
    final = dict(model.named_parameters())
    assert all(torch.equal(p, final[n]) for n, p in after_1.named_parameters() if "lora_B" in n)
    assert any(float(p.detach().abs().sum()) > 0 for n, p in final.items() if "lora_B" in n)   # trained
    with pytest.raises(FileNotFoundError, match=r"saved no adapter after iteration 5 \(saved after: \[1\]\)"):
        load_run_policy(tmp_path / "run", iteration=5)


def test_rollout_settings_sample_in_training_and_score_at_eval_temperature():
    cfg = TrainConfig(env="alfworld", model="smollm2-135m", temperature=0.9, top_p=0.95, eval_temperature=0.0,
                      max_new_tokens=24, share_prefix=True, carry_cache=True)
    train, held_out = cfg.rollout_settings(30, train=True), cfg.rollout_settings(30, train=False)
    assert (train.temperature, train.top_p, train.do_sample) == (0.9, 0.95, True)
    assert train.logprobs and train.capture_hidden == cfg.capture_hidden
    assert not held_out.do_sample and held_out.top_p == 1.0                      # greedy, whole vocabulary
    assert not held_out.logprobs and not held_out.capture_hidden                 # nothing to train on
    assert train.max_steps == held_out.max_steps == 30 and train.max_new_tokens == 24
    assert train.carry_cache == cfg.compact()              # carried caches need compact prompts
    assert train.require_think == cfg.think_required() == cfg.prompt_settings().require_think
    sampled = dataclasses.replace(cfg, eval_temperature=0.4).rollout_settings(30, train=False)
    assert sampled.do_sample and sampled.temperature == 0.4
    whole = dataclasses.replace(cfg, compact_prompts="no")
    assert cfg.compact() and not whole.rollout_settings(30, train=True).carry_cache
