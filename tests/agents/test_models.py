import pytest
import torch

from agents.models import (LoraSettings, TinyConfig, _build_tiny, add_lora, default_hidden_layer,
                           layer_module_index, load_policy)


def test_tiny_build_is_deterministic(tmp_path):
    cfg = TinyConfig()
    _build_tiny(tmp_path / "a", cfg)
    _build_tiny(tmp_path / "b", cfg)
    ma, ta = load_policy(str(tmp_path / "a"))
    mb, tb = load_policy(str(tmp_path / "b"))
    assert ta.get_vocab() == tb.get_vocab()
    for (na, pa), (nb, pb) in zip(ma.state_dict().items(), mb.state_dict().items()):
        assert na == nb and torch.equal(pa, pb)


def test_tiny_has_qwen_chat_template_and_left_padding(tiny):
    model, tok = tiny
    assert model.config.model_type == "qwen2" and tok.padding_side == "left"
    text = tok.apply_chat_template([{"role": "user", "content": "craft 4 oak planks"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text and len(ids) < len(text) / 2      # BPE merges the recipe words


def test_hidden_layer_defaults_and_validation():
    assert default_hidden_layer(28) == -12          # BiPACE's layer for Qwen2.5-1.5B
    assert layer_module_index(-12, 28) == 16        # hidden_states[17] = output of block 16
    assert -4 <= default_hidden_layer(4) <= -1
    with pytest.raises(ValueError, match="out of range"):
        layer_module_index(-6, 4)


def test_lora_targets_and_trainable_params(tiny):
    from agents.models import load_policy
    model, _ = load_policy("tiny")
    model = add_lora(model, LoraSettings(rank=4, alpha=8, mlp=True))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert any("q_proj" in n for n in trainable) and any("down_proj" in n for n in trainable)


def test_bad_dtype_is_reported():
    with pytest.raises(ValueError, match="unknown dtype"):
        load_policy("tiny", dtype="float8")


def test_bf16_and_gradient_checkpointing_train_the_adapter():
    from agents.ppo import response_logprobs
    model, tok = load_policy("tiny", dtype="bfloat16", gradient_checkpointing=True)
    model = add_lora(model, LoraSettings(rank=4, alpha=8))
    model.train()
    logp, _, mask = response_logprobs(model, [torch.tensor([5, 6, 7])], [torch.tensor([8, 9])],
                                      tok.pad_token_id)
    (-(logp * mask).sum()).backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_B" in n]
    assert grads and all(g is not None and torch.isfinite(g.float()).all() for g in grads)
    assert next(model.parameters()).dtype == torch.bfloat16


def test_no_future_warnings_from_checkpointing_and_lora(tiny):
    """transformers 5 renamed gradient checkpointing; peft still reads the old name."""
    import warnings

    from agents.models import LoraSettings, add_lora, load_policy
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        model, _ = load_policy("tiny", gradient_checkpointing=True)
        assert model.is_activation_checkpointing
        add_lora(model, LoraSettings(rank=4, alpha=8))


def test_the_embedding_layer_comes_from_the_model_preset_unless_given():
    from agents.config import TrainConfig
    from agents.models import MODEL_PRESETS, SMOLLM2, TINY
    # smollm2-135m's states separate at its last block, not at BiPACE's depth
    # (benchmarks/credit/eps_calibration.py)
    assert MODEL_PRESETS[SMOLLM2].bigpo_setting == "anchor-calibrated"     # docs/estimators.md: the evidence
    assert TrainConfig(model=SMOLLM2).resolved_hidden_layer() == -1
    assert TrainConfig(model=SMOLLM2, bigpo_setting="paper").resolved_hidden_layer() is None   # 17/28 deep
    assert TrainConfig(model=SMOLLM2, hidden_layer=-5).resolved_hidden_layer() == -5
    assert TrainConfig(model=TINY).resolved_hidden_layer() is None          # BiPACE's depth, scaled
    assert TrainConfig(model="some/folder").resolved_hidden_layer() is None
