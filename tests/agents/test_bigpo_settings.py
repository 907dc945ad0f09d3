"""Named BiGPO settings (agents/bigpo_settings.py): the paper's layer and radius on SmolLM2 and on Qwen2.5
shapes, the anchor-calibrated one, and what overrides what."""
import pytest
import torch

from agents.bigpo_settings import BIGPO_SETTINGS, get_bigpo_setting
from agents.capture import HiddenCapture
from agents.config import TrainConfig
from agents.models import SMOLLM2, decoder_layers
from agents.presets import get_preset

QWEN_1_5B, QWEN_7B = "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct"


def qwen2_shape(num_layers: int):
    """A Qwen2.5 decoder of the given depth at a toy width (the depth is what places the layer)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=num_layers,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg).eval()


def captured_hidden_index(model, layer) -> int:
    """Which of HF's hidden_states[1..L-1] the capture at ``layer`` equals (block outputs before the final
    norm; the last one HF normalises)."""
    ids = torch.randint(0, 64, (1, 7))
    cap = HiddenCapture(model, layer)
    cap.arm()
    with torch.no_grad():
        out = model(input_ids=ids, output_hidden_states=True)
    cap.remove()
    hits = [i for i, h in enumerate(out.hidden_states[1:-1], start=1)
            if torch.allclose(h[:, -1], cap.value, atol=1e-6)]
    assert len(hits) == 1
    return hits[0]


@pytest.mark.parametrize("model, blocks, setting, index, eps", [
    (QWEN_1_5B, 28, "paper", 17, 0.05),          # hidden_states[-12] of 28 blocks, as the paper
    (QWEN_7B, 28, "paper-7b", 21, 0.10),         # hidden_states[-8], the paper's 7B row
    (SMOLLM2, 30, "paper", 18, 0.05),            # 17/28 of 30 blocks
])
def test_the_paper_setting_places_the_layer_at_its_depth_on_each_shape(model, blocks, setting, index, eps):
    cfg = TrainConfig(model=model, bigpo_setting=setting)
    assert cfg.resolved_eps() == eps
    assert captured_hidden_index(qwen2_shape(blocks), cfg.resolved_hidden_layer()) == index


def test_hub_models_default_to_the_paper_and_smollm2_to_its_calibration():
    for model in (QWEN_1_5B, "tiny"):
        cfg = TrainConfig(model=model)
        assert cfg.resolved_bigpo_setting() == "paper"
        assert (cfg.resolved_hidden_layer(), cfg.resolved_eps()) == (None, 0.05)
    small = TrainConfig(model=SMOLLM2)
    assert small.resolved_bigpo_setting() == "anchor-calibrated"
    assert (small.resolved_hidden_layer(), small.resolved_eps()) == (-1, 0.002)


def test_the_paper_setting_on_the_real_smollm2_captures_block_18_of_30():
    pytest.importorskip("gguf")
    from agents.models import load_policy
    try:
        model, _ = load_policy(SMOLLM2)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert len(decoder_layers(model)) == 30
    layer = TrainConfig(model=SMOLLM2, bigpo_setting="paper").resolved_hidden_layer()
    assert captured_hidden_index(model, layer) == 18


def test_naming_a_setting_in_set_is_not_overridden_by_the_preset():
    for preset in ("textcraft-table", "webshop-table", "alfworld-table"):
        cfg = get_preset(preset, ["bigpo_setting=paper"])
        assert (cfg.resolved_hidden_layer(), cfg.resolved_eps()) == (None, 0.05), preset
        # an explicit layer or radius still wins over the named setting
        cfg = get_preset(preset, ["bigpo_setting=paper", "eps=0.01", "hidden_layer=-3"])
        assert (cfg.resolved_hidden_layer(), cfg.resolved_eps()) == (-3, 0.01)


def test_written_out_settings_compare_equal_whichever_name_gave_them():
    named = get_preset("textcraft-table")                   # SmolLM2's anchor-calibrated, by name
    legacy = TrainConfig(**{**named.__dict__, "bigpo_setting": "", "eps": 0.002, "hidden_layer": -1})
    assert named.bigpo_written_out() == legacy.bigpo_written_out()
    paper = get_preset("textcraft-table", ["bigpo_setting=paper"])
    assert named.bigpo_written_out() != paper.bigpo_written_out()


def test_unknown_names_and_uncalibrated_models_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match="unknown bigpo_setting 'papr'.*anchor-calibrated"):
        TrainConfig(bigpo_setting="papr")
    with pytest.raises(ValueError, match="no calibration for model 'Qwen/Qwen2.5-1.5B-Instruct'.*paper"):
        TrainConfig(model=QWEN_1_5B, bigpo_setting="anchor-calibrated").resolved_eps()
    assert set(BIGPO_SETTINGS) == {"paper", "paper-7b", "anchor-calibrated"}
    assert get_bigpo_setting("paper").layer_for("anything") is None
