"""The hindsight scoring pass (agents.hindsight) and HCAPO/RELACE in the trainer, on the tiny model."""
import json

import numpy as np
import pytest
import torch

from agents.config import TrainConfig
from agents.hindsight import HindsightSettings, augment_prompt, generation_tail, score_hindsight
from agents.trainer import Trainer
from fake_env import FakeCraftEnv


class LuckyCraftEnv(FakeCraftEnv):
    """Episodes of even tasks are won at their second step whatever the action, so that a tiny random
    policy has successful trajectories to score; odd tasks play as FakeCraftEnv."""

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        if self.t >= 2 and self.task % 2 == 0 and not self.won:
            self.won = True
            return obs, 1.0, True, False, self._info(obs, action_valid=info["action_valid"])
        return obs, reward, term, trunc, info


def _trainer(tmp_path, estimator, tasks, **kw):
    cfg = TrainConfig(env="textcraft", estimator=estimator, model="tiny", out_dir=str(tmp_path),
                      batch_tasks=2, group_size=2, max_new_tokens=6, max_steps=3, iterations=1,
                      eval_every=0, eval_tasks=2, eval_batch=2, lora_rank=4, lora_alpha=8, lr=1e-2,
                      mini_batch_rows=4, micro_batch_rows=3, tensorboard=False, progress=False, **kw)
    return Trainer(cfg, make_env=lambda: LuckyCraftEnv(max_steps=3), train_tasks=tasks, eval_tasks=[8, 9])


@pytest.mark.parametrize("estimator", ["hcapo", "relace"])
def test_trainer_iteration_scores_successful_rows_and_trains(tmp_path, estimator):
    tr = _trainer(tmp_path, estimator, tasks=[0, 2, 4, 6])            # every episode is won
    before = {n: p.detach().clone() for n, p in tr.model.named_parameters() if "lora_B" in n}
    m = tr.iteration(1)
    assert m["hindsight_rows"] == m["rows"] > 0 and m["hindsight_tokens"] > 0 and m["hindsight_s"] > 0
    assert np.isfinite(m["adv_mean"]) and m["adv_std"] > 0   # all won: A^E is 0, the hindsight term is not
    assert m["grad_norm"] > 0
    assert any(not torch.equal(before[n], p.detach()) for n, p in tr.model.named_parameters() if n in before)


def test_pass_fills_successful_rows_only_and_is_batching_invariant(tmp_path):
    tr = _trainer(tmp_path, "hcapo", tasks=[0, 1])
    ro, _ = tr.rollout(1)
    view = ro.batch.view
    won = np.bincount(view.traj, weights=ro.batch.reward)[view.traj] > 0
    assert won.any() and (~won).any()
    sums, stats = score_hindsight(tr.model, tr.tok, ro, HindsightSettings(micro_batch_rows=16))
    assert np.all(np.isnan(sums[~won])) and np.all(np.isfinite(sums[won]))
    assert stats["hindsight_rows"] == int(won.sum()) and stats["hindsight_truncated"] == 0
    nonempty = won & (np.array([len(r) for r in ro.response_ids]) > 0)
    assert np.all(sums[nonempty] < 0)
    # one row per forward, and without the shared prefix: the same numbers (padding and caching only)
    one_by_one = HindsightSettings(micro_batch_rows=1, share_prefix=False, save_dir=str(tmp_path / "audit"))
    alone, _ = score_hindsight(tr.model, tr.tok, ro, one_by_one)
    np.testing.assert_allclose(alone[won], sums[won], rtol=1e-4, atol=1e-4)
    # the audit file holds what was scored: the won rows, their x~ (the rollout prompt plus the block) and y
    saved = [json.loads(line) for line in (tmp_path / "audit" / "hindsight.jsonl").read_text().splitlines()]
    assert [r["row"] for r in saved] == np.flatnonzero(won).tolist()
    for r in saved:
        assert r["response_ids"] == ro.response_ids[r["row"]].tolist()
        assert "SUCCESSFULLY" in tr.tok.decode(r["prompt_ids"]) and r["hind_logp_sum"] == alone[r["row"]]
    # the block changes the conditioning, so the sums differ from the rollout policy's own
    from agents.ppo import row_logp_sums
    old = row_logp_sums(ro.response_ids, tr._old_logprobs(ro))["old_logp_sum"]
    assert np.max(np.abs(sums[nonempty] - old[nonempty])) > 1e-3
    # failures are scored under the failure block when asked
    every, stats = score_hindsight(tr.model, tr.tok, ro, HindsightSettings(score_failures=True))
    assert np.all(np.isfinite(every)) and stats["hindsight_rows"] == len(sums)
    np.testing.assert_allclose(every[won], sums[won], rtol=1e-4, atol=1e-4)


def test_block_goes_before_the_generation_prompt(tiny):
    _, tok = tiny
    text = tok.apply_chat_template([{"role": "user", "content": "look around"}], tokenize=False,
                                   add_generation_prompt=True)
    prompt = torch.tensor(tok(text, add_special_tokens=False)["input_ids"])
    tail = generation_tail(tok)
    block = tok("\n\n[Hindsight] won", add_special_tokens=False)["input_ids"]
    aug, cut = augment_prompt(prompt, block, tail, 4096)
    assert not cut
    decoded = tok.decode(aug)
    assert decoded.index("look around") < decoded.index("[Hindsight] won") < decoded.rindex("assistant")
    assert aug[-len(tail):].tolist() == tail
    assert aug[:len(prompt) - len(tail)].tolist() == prompt[:-len(tail)].tolist()
    # too long: the oldest tokens go, never the block
    short, cut = augment_prompt(prompt, block, tail, len(block) + len(tail) + 3)
    assert cut and len(short) == len(block) + len(tail) + 3
    assert short[-len(block) - len(tail):].tolist() == block + tail
    with pytest.raises(ValueError, match="does not end with the chat template's generation prompt"):
        augment_prompt(prompt[:-1], block, tail, 4096)
