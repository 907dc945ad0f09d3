"""The agent stack on the real TextCraft env (short episodes, so it stays fast)."""
import numpy as np
import pytest
import torch

from agents.config import TrainConfig
from agents.envs import get_env_spec
from agents.prompts import PromptSettings, make_prompter
from agents.rollout import RolloutCollector, RolloutSettings
from agents.sft import expert_examples

pytest.importorskip("bipace_envs.textcraft.env")


def _make():
    return get_env_spec("textcraft").make(max_steps=2, preset="agentgym", depths=(1, 2))


def test_splits_are_disjoint_and_expert_prompts_render(tiny):
    spec = get_env_spec("textcraft")
    env = _make()
    train, test = spec.tasks(env, "train"), spec.tasks(env, "test")
    env.close()
    assert train and test and not set(train) & set(test)
    _, tok = tiny
    ex = expert_examples(spec, _make, train[:3],
                         make_prompter("textcraft", PromptSettings(require_think=False)),
                         tok, max_steps=2)
    first = ex[0].response
    assert first.startswith("<action>get ") and first.endswith("</action><|im_end|>")


def test_rollout_on_textcraft_records_env_anchor_and_validity(tiny):
    model, tok = tiny
    spec = get_env_spec("textcraft")
    rs = RolloutSettings(max_steps=2, max_new_tokens=4, require_think=False)
    col = RolloutCollector(model, tok, _make, 2,
                           make_prompter("textcraft", PromptSettings(require_think=False)),
                           rs, spec.reward_map)
    torch.manual_seed(0)
    ro = col.collect(["stick", "stick"], [0, 0], [0, 0])
    col.close()
    b = ro.batch
    assert len(b.reward) == 4 and np.all(b.reward == 0)          # random tiny policy: no win in 2 steps
    assert b.anchor[0].startswith("Crafting commands:") and "Goal: craft stick." in b.anchor[0]
    assert b.action_valid.dtype == bool


def test_trainer_rejects_bad_env_kwargs():
    with pytest.raises(ValueError, match="JSON object"):
        TrainConfig(env_kwargs="depths=1").env_kwargs_dict()


def test_cli_warm_start_then_rl_on_textcraft(tmp_path):
    import json
    from agents.cli import main
    args = ["--env", "textcraft", "--estimator", "bipace", "--model", "tiny", "--out-dir", str(tmp_path),
            "--env-kwargs", json.dumps({"preset": "agentgym", "depths": [1, 2]}), "--no-show-admissible",
            "--max-steps", "3", "--max-new-tokens", "12", "--sft-steps", "4", "--sft-episodes", "8",
            "--sft-passes", "2", "--sft-rename", "0.5",
            "--batch-tasks", "2", "--group-size", "2", "--iterations", "2", "--eval-tasks", "4",
            "--eval-batch", "4", "--checkpoint-every", "1", "--no-progress"]
    assert main(args) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["estimator"] == "bipace" and summary["eval_after"] is not None
    assert (tmp_path / "warm_start" / "config.json").exists() and (tmp_path / "adapter").is_dir()
    assert main(args + ["--resume", "--iterations", "3"]) == 0        # the same settings, one more iteration
    assert len((tmp_path / "train.csv").read_text().splitlines()) == 4      # header + iterations 1..3
