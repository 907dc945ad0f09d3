"""The verl bridge's hindsight prompts and settings (the pass itself runs end to end in
test_end_to_end_on_cpu: the actor worker group's compute_log_prob on the augmented samples)."""
from __future__ import annotations

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from agents.hindsight import generation_tail  # noqa: E402
from agents.verl_bridge.hindsight import hindsight_prompts, hindsight_settings  # noqa: E402
from agents.verl_bridge.steps import ACTION_KEY, OBS_KEY, step_fields  # noqa: E402

# (trajectory, step, observation, reward): t0 wins at its second step, t1 fails
STEPS = [("t0", 0, "You are in the kitchen.", 0.0), ("t0", 1, "The fridge is open.", 10.0),
         ("t1", 0, "You are in the kitchen.", 0.0), ("t1", 1, "You see a sink.", 0.0),
         ("t1", 2, "Nothing happens.", 0.0)]


def rows_and_prompts(tok):
    rows, prompts = [], []
    for traj, step, obs, reward in STEPS:
        rows.append(step_fields("g", traj, step, reward, True, obs, "look", f"{traj} action {step}"))
        msgs = [{"role": "user", "content": f"{obs} What next?"}]
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        prompts.append(torch.tensor(tok(ids, add_special_tokens=False)["input_ids"]))
    return rows, prompts


def test_won_rows_get_the_success_block_before_the_generation_prompt(tiny):
    _, tok = tiny
    rows, prompts = rows_and_prompts(tok)
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"temperature": 0.7}}})
    settings = hindsight_settings(config, {})
    assert settings.temperature == 0.7 and not settings.score_failures
    x, truncated = hindsight_prompts(rows, prompts, tok, settings)
    assert sorted(x) == [0, 1] and truncated == 0            # the won trajectory's rows only
    tail = generation_tail(tok)
    for r, p in x.items():
        assert p[-len(tail):].tolist() == tail
        body = prompts[r][:len(prompts[r]) - len(tail)]
        assert torch.equal(p[:len(body)], body)               # the prompt the policy saw, then the block
        block = tok.decode(p[len(body):len(p) - len(tail)])
        assert "SUCCESSFULLY after 2 steps" in block and f"at step {r + 1}" in block
        assert "The fridge is open." in block                 # the last step's observation


def test_score_failures_gives_failed_rows_the_failure_block(tiny):
    _, tok = tiny
    rows, prompts = rows_and_prompts(tok)
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"temperature": 1.0}},
                               "bipace": {"hindsight": {"score_failures": True}}})
    x, _ = hindsight_prompts(rows, prompts, tok, hindsight_settings(config, {}))
    assert sorted(x) == [0, 1, 2, 3, 4]
    assert "FAILED after 3 steps" in tok.decode(x[3]) and "Nothing happens." in tok.decode(x[3])


def test_include_future_actions_lists_the_later_projected_actions(tiny):
    _, tok = tiny
    rows, prompts = rows_and_prompts(tok)
    hind = {"include_future_actions": True, "score_failures": True}
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"temperature": 1.0}},
                               "bipace": {"hindsight": hind}})
    x, _ = hindsight_prompts(rows, prompts, tok, hindsight_settings(config, {}))
    assert "Then: t1 action 1; t1 action 2" in tok.decode(x[2])     # the later steps, never the current
    assert "Then: t1 action 2" in tok.decode(x[3]) and "t1 action 1" not in tok.decode(x[3])
    assert "Then:" not in tok.decode(x[4]) and "Then:" not in tok.decode(x[1])    # last steps: nothing after


def test_bad_settings_and_old_samples_are_refused(tiny):
    _, tok = tiny
    base = {"actor_rollout_ref": {"rollout": {"temperature": 1.0}}}
    with pytest.raises(ValueError, match="unknown keys.*score_failure"):
        hindsight_settings(OmegaConf.create({**base, "bipace": {"hindsight": {"score_failure": True}}}), {})
    with pytest.raises(ValueError, match="micro_batch_rows does not apply under verl.*log_prob_micro"):
        micro = {"hindsight": {"micro_batch_rows": 8}}
        hindsight_settings(OmegaConf.create({**base, "bipace": micro}), {})
    rows, prompts = rows_and_prompts(tok)
    for r in rows:
        r.pop(ACTION_KEY)
    future = OmegaConf.create({**base, "bipace": {"hindsight": {"include_future_actions": True}}})
    with pytest.raises(ValueError, match="carry no 'bipace_action'.*older bipace_env agent loop"):
        hindsight_prompts(rows, prompts, tok, hindsight_settings(future, {}))
    for r in rows:
        r.pop(OBS_KEY)
    with pytest.raises(ValueError, match="carry no 'bipace_obs'"):
        hindsight_prompts(rows, prompts, tok, hindsight_settings(OmegaConf.create(base), {}))
