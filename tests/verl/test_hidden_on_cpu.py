"""The BiGPO hidden-state tap: read during a log-prob forward over verl's padded layout, it equals the
hidden state of a direct forward at each row's last prompt token (CPU, tiny model)."""
from __future__ import annotations

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")
import torch  # noqa: E402

from agents.verl_bridge.hidden import (HiddenStateTap, last_prompt_positions,  # noqa: E402
                                       packed_last_prompt_positions)


def verl_layout(tok, prompts, responses, prompt_width, response_width):
    """Left-padded prompts + right-padded responses, as verl's agent loop worker pads them."""
    pad = tok.pad_token_id
    ids, mask = [], []
    for p, r in zip(prompts, responses):
        p, r = tok(p, add_special_tokens=False)["input_ids"], tok(r, add_special_tokens=False)["input_ids"]
        ids.append([pad] * (prompt_width - len(p)) + p + r + [pad] * (response_width - len(r)))
        mask.append([0] * (prompt_width - len(p)) + [1] * (len(p) + len(r)) + [0] * (response_width - len(r)))
    ids, mask = torch.tensor(ids), torch.tensor(mask)
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


# not -1: HF's hidden_states[-1] has the final norm applied, the last block's output (what the hook and
# agents.capture.HiddenCapture read) does not
@pytest.mark.parametrize("layer", [None, -2, 1])
def test_tap_in_the_log_prob_forward_equals_a_direct_forward(tiny, layer):
    model, tok = tiny
    prompts = ["You are in a kitchen. Your task is to: heat an egg.", "go to fridge 1", "Goal: craft stick"]
    responses = ["<action>open fridge 1</action>", "<action>look</action>",
                 "<think>x</think><action>get 1 log"]
    pw = max(len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts) + 2
    ids, mask, pos = verl_layout(tok, prompts, responses, pw, 24)
    tap = HiddenStateTap(model, layer)
    try:
        with torch.no_grad(), tap.capture(last_prompt_positions(pw, len(prompts))):
            # the old-log-prob pass
            logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
            torch.log_softmax(logits[:, pw - 1:-1].float(), -1)
        with torch.no_grad():
            direct = model(input_ids=ids, attention_mask=mask, position_ids=pos,
                           output_hidden_states=True).hidden_states[tap.layer][:, pw - 1]
    finally:
        tap.remove()
    torch.testing.assert_close(tap.value, direct.float())
    assert tap.value.shape == (3, model.config.hidden_size)
    assert not torch.allclose(tap.value[0], tap.value[1])      # different prompts, different states
    # the last prompt token of each row is its prompt's last real token, not padding or response
    last = ids[:, pw - 1].tolist()
    assert last == [tok(p, add_special_tokens=False)["input_ids"][-1] for p in prompts]


def test_tap_is_idle_outside_capture_and_keeps_micro_batches_in_order(tiny):
    model, tok = tiny
    ids, mask, pos = verl_layout(tok, ["a b c", "d e", "f"], ["x", "y", "z"], 6, 3)
    tap = HiddenStateTap(model)
    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask, position_ids=pos)
            with pytest.raises(RuntimeError, match="no forward"):
                tap.value
            with tap.capture(last_prompt_positions(6, 2)):
                model(input_ids=ids[:2], attention_mask=mask[:2], position_ids=pos[:2])
                tap.positions = last_prompt_positions(6, 1)
                model(input_ids=ids[2:], attention_mask=mask[2:], position_ids=pos[2:])
            whole = model(input_ids=ids, attention_mask=mask, position_ids=pos,
                          output_hidden_states=True).hidden_states[tap.layer][:, 5]
    finally:
        tap.remove()
    torch.testing.assert_close(tap.value, whole.float(), atol=1e-5, rtol=1e-4)


def test_packed_positions_and_bad_input():
    rows, cols = packed_last_prompt_positions(torch.tensor([0, 5, 9, 15]), torch.tensor([3, 1, 6]))
    assert rows.tolist() == [0, 0, 0] and cols.tolist() == [2, 5, 14]
    with pytest.raises(ValueError, match="one entry more"):
        packed_last_prompt_positions(torch.tensor([0, 5]), torch.tensor([3, 1]))
    with pytest.raises(ValueError, match="between 1 token"):
        packed_last_prompt_positions(torch.tensor([0, 5]), torch.tensor([6]))
    with pytest.raises(ValueError, match="prompt_width"):
        last_prompt_positions(0, 2)
