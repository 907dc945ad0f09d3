import numpy as np
import pytest
import torch

from agents.envs import reward_won
from agents.prompts import PromptSettings, make_prompter
from agents.rollout import CarriedCache, RolloutCollector, RolloutSettings
from agents.ppo import response_logprobs


def _collector(tiny, make_env, n=4, **kw):
    model, tok = tiny
    rs = RolloutSettings(max_steps=3, max_new_tokens=6, require_think=False, **kw)
    return RolloutCollector(model, tok, make_env, n,
                            make_prompter("textcraft", PromptSettings(require_think=False)),
                            rs, reward_won)


def test_rows_groups_and_fields(tiny, fake_env_factory):
    col = _collector(tiny, fake_env_factory)
    torch.manual_seed(0)
    ro = col.collect([0, 0, 5, 5], [3, 3, 4, 4], [7, 7, 8, 8])
    b = ro.batch
    # one row per active step; every episode ran until it ended (won or truncated at 3 steps)
    assert len(b.reward) == ro.episode_length.sum() == len(ro.response_ids)
    for e in range(4):
        steps = b.step_idx[ro.env_index == e]
        assert steps.tolist() == list(range(len(steps)))
    assert set(b.group_id[ro.env_index < 2]) == {7} and set(b.group_id[ro.env_index >= 2]) == {8}
    # time-major row order (Rollout docstring): sorted by step, then by env
    order = list(zip(b.step_idx.tolist(), ro.env_index.tolist()))
    assert order == sorted(order) and ro.env_index[:4].tolist() == [0, 1, 2, 3]
    # the anchor is the observation the action was taken on: step 0 = the reset text of the task
    first = b.anchor[b.step_idx == 0]
    assert first[0] == first[1] and "Goal: craft oak log block." in first[0] and first[0] != first[2]
    assert b.embedding.shape == (len(b.reward), tiny[0].config.hidden_size)
    assert np.allclose(np.linalg.norm(b.embedding, axis=1), 1, atol=1e-5)
    assert all(len(lp) == len(r) for lp, r in zip(ro.old_logprobs, ro.response_ids))
    col.close()


def test_hidden_state_is_the_last_prompt_token_of_the_chosen_layer(tiny, fake_env_factory):
    model, tok = tiny
    col = _collector(tiny, fake_env_factory, hidden_layer=-2)
    texts = ["<|im_start|>user\nGoal: craft stick.<|im_end|>\n<|im_start|>assistant\n",
             "<|im_start|>user\nshort<|im_end|>\n<|im_start|>assistant\n"]
    p_ids, _, _, _, emb, _ = col.generate(texts)
    for k, p in enumerate(p_ids):
        with torch.no_grad():
            hs = model(input_ids=p[None], output_hidden_states=True).hidden_states[-2][0, -1]
        ref = torch.nn.functional.normalize(hs.float(), dim=0).numpy()
        assert np.allclose(emb[k], ref, atol=1e-4)
    col.close()


def test_carried_cache_gives_the_rows_of_fresh_prompts(tiny, fake_env_factory, monkeypatch):
    """Each step continuing from the env's previous KV cache (compact prompts only append) decodes the
    same answers with the same log-probs and embeddings as running every prompt afresh, whether the
    columns a step does not reuse are masked or dropped; dropping them keeps the cache narrower."""
    model, tok = tiny
    reused, widths = [], {}
    real = CarriedCache.continue_with

    def spy(self, envs, prompts, device, compact=False):
        reused.append(len(envs))
        cache, keep, suffixes = real(self, envs, prompts, device, compact)
        assert cache.get_seq_length() == keep.shape[1]
        widths.setdefault(compact, []).append(keep.shape[1])
        return cache, keep, suffixes

    monkeypatch.setattr(CarriedCache, "continue_with", spy)
    rows = []
    for carry, compact in ((False, False), (True, False), (True, True)):
        reused.clear()
        rs = RolloutSettings(max_steps=3, max_new_tokens=6, require_think=False, do_sample=False,
                             carry_cache=carry, compact_cache=compact)
        prompter = make_prompter("textcraft", PromptSettings(require_think=False, compact=True,
                                                             history_length=3))
        col = RolloutCollector(model, tok, fake_env_factory, 4, prompter, rs, reward_won)
        rows.append(col.collect([0, 0, 5, 6], [3, 4, 4, 4], [7, 7, 8, 9]))
        col.close()
        assert bool(reused) == carry
    fresh = rows[0]
    assert max(fresh.batch.step_idx) >= 1 and sum(reused) == int((fresh.batch.step_idx > 0).sum())
    for carried in rows[1:]:
        assert [p.tolist() for p in fresh.prompt_ids] == [p.tolist() for p in carried.prompt_ids]
        assert [r.tolist() for r in fresh.response_ids] == [r.tolist() for r in carried.response_ids]
        assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(fresh.old_logprobs, carried.old_logprobs))
        assert np.allclose(fresh.batch.embedding, carried.batch.embedding, atol=1e-4)
    # the same steps continued; the compacted cache holds only reused columns, the masked one everything
    assert len(widths[True]) == len(widths[False])
    assert all(c <= m for c, m in zip(widths[True], widths[False]))
    assert sum(widths[True]) < sum(widths[False])


def test_gathered_cache_columns_continue_like_a_fresh_forward(tiny):
    """``gather_columns`` on a cache with gaps (padding inside rows): the continuation's logits equal a
    fresh forward over each row's real tokens: keys keep the positions they were computed at."""
    from agents.prefix import cache_kwarg, gather_columns, gatherable, left_pad, output_cache, positions
    model, _ = tiny
    torch.manual_seed(0)
    rows = [torch.randint(3, 200, (n,)) for n in (7, 4)]
    # row 0: 7 tokens then 3 padding columns; row 1: 2 padding, 4 tokens, 4 padding (gapped layout)
    ids = torch.zeros((2, 10), dtype=torch.long)
    mask = torch.zeros((2, 10), dtype=torch.long)
    ids[0, :7], mask[0, :7] = rows[0], 1
    ids[1, 2:6], mask[1, 2:6] = rows[1], 1
    nxt = torch.randint(3, 200, (2, 3))
    with torch.no_grad():
        cache = output_cache(model(input_ids=ids, attention_mask=mask, position_ids=positions(mask),
                                   use_cache=True))
        index, keep = left_pad([torch.nonzero(m)[:, 0] for m in mask], 0)
        gather_columns(cache, index)
        assert cache.get_seq_length() == 7 and keep.tolist() == [[1] * 7, [0, 0, 0, 1, 1, 1, 1]]
        full = torch.cat([keep, torch.ones_like(nxt)], 1)
        got = model(input_ids=nxt, attention_mask=full, position_ids=positions(full)[:, -3:],
                    **{cache_kwarg(model): cache}).logits
        for r in range(2):
            want = model(input_ids=torch.cat([rows[r], nxt[r]])[None]).logits[0, -3:]
            assert torch.allclose(got[r], want, atol=1e-4)
    # caches that place their own columns (sliding windows, static, quantised) are not gathered
    from types import SimpleNamespace

    class SlidingWindowLayer:      # any layer type but the plain growing one (constructors vary by version)
        pass

    other = SimpleNamespace(layers=[SlidingWindowLayer()])
    assert gatherable(cache) and not gatherable(other)
    with pytest.raises(TypeError, match="SlidingWindowLayer"):
        gather_columns(other, index)


def test_old_logprobs_match_a_fresh_forward(tiny, fake_env_factory):
    model, tok = tiny
    col = _collector(tiny, fake_env_factory, temperature=1.0)
    torch.manual_seed(1)
    ro = col.collect([1, 1, 2, 2], [0, 0, 1, 1], [0, 0, 1, 1])
    with torch.no_grad():
        lp, _, mask = response_logprobs(model, ro.prompt_ids[:4], ro.response_ids[:4], tok.pad_token_id)
    for k in range(4):
        n = len(ro.response_ids[k])
        assert torch.allclose(lp[k, :n], ro.old_logprobs[k], atol=1e-4)
    col.close()


def test_capture_off_gives_no_embedding_and_bad_inputs_fail(tiny, fake_env_factory):
    col = _collector(tiny, fake_env_factory, n=2, capture_hidden=False)
    ro = col.collect([0, 0], [0, 0], [0, 0])
    assert ro.batch.embedding is None
    with pytest.raises(ValueError, match="one task id"):
        col.collect([0], [0, 0], [0, 0])
    col.close()


def test_overlong_prompt_is_an_error_unless_left_truncation(tiny, fake_env_factory):
    col = _collector(tiny, fake_env_factory, n=2, max_prompt_tokens=10)
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        col.collect([0, 0], [0, 0], [0, 0])
    col.close()
    col = _collector(tiny, fake_env_factory, n=2, max_prompt_tokens=10, truncation="left")
    ro = col.collect([0, 0], [0, 0], [0, 0])
    assert max(len(p) for p in ro.prompt_ids) <= 10
    col.close()
