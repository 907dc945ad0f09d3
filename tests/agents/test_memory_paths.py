"""The memory-lean paths give today's numbers: sampled tokens' log-probs gathered during ``generate``
(instead of every step's full-vocabulary logits) and the update's log-probs/entropy from a chunked LM head
(instead of the whole micro-batch's float32 logits); per-phase GPU memory columns."""
import pytest
import torch

from agents.gpu_memory import PhaseMemory, progress_text
from agents.models import LoraSettings, add_lora, load_policy
from agents.ppo import plain_lm_head, response_logprobs
from agents.capture import SampledLogprobs


@pytest.fixture(scope="module", params=["tiny", "smollm2-135m"])
def policy(request):
    """(LoRA model, tokenizer) with a non-zero adapter, so adapter-on and adapter-off differ."""
    model, tok = load_policy(request.param)
    torch.manual_seed(0)
    model = add_lora(model, LoraSettings(rank=4, alpha=8))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    return model, tok


def _prompts(tok, n=4):
    texts = [f"Goal: craft item {k}. Inventory: [stick] ({k + 1}). Your action:" for k in range(n)]
    texts[1] += " a longer prompt, so the batch is left-padded"
    return [torch.tensor(x) for x in tok(texts, add_special_tokens=False)["input_ids"]]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_gathered_logprobs_equal_those_of_the_stored_logits(policy, temperature):
    model, tok = policy
    from agents.prefix import left_pad
    ids, mask = left_pad(_prompts(tok), tok.pad_token_id)
    rec = SampledLogprobs(model, temperature)
    try:
        rec.arm()
        torch.manual_seed(3)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=True,
                                 temperature=temperature, top_p=1.0, top_k=0, pad_token_id=tok.pad_token_id,
                                 return_dict_in_generate=True, output_logits=True,
                                 stopping_criteria=[rec])
        resp = out.sequences[:, ids.shape[1]:]
        gathered = rec.take(resp.shape[1])
    finally:
        rec.remove()
    stored = torch.stack([torch.log_softmax(lg.float() / temperature, -1).gather(1, resp[:, t:t + 1])
                          .squeeze(1) for t, lg in enumerate(out.logits)], 1)
    assert gathered.shape == stored.shape == resp.shape
    assert torch.equal(gathered, stored)
    assert (gathered < 0).all()


def test_recorder_refuses_a_generate_it_did_not_see(policy):
    model, tok = policy
    rec = SampledLogprobs(model, 1.0)
    rec.remove()
    rec.arm()
    with pytest.raises(RuntimeError, match="recorded 0 sampled tokens"):
        rec.take(3)


def _score(model, tok, chunk_tokens, keys=None):
    """Log-probs, entropy and mask of fixed responses, and the LoRA gradients of a loss over both."""
    prompts = _prompts(tok)
    responses = [p[-k:].flip(0) for p, k in zip(prompts, (5, 1, 3, 4))]   # uneven lengths: right padding
    model.zero_grad(set_to_none=True)
    logp, ent, mask = response_logprobs(model, prompts, responses, tok.pad_token_id, temperature=0.8,
                                        keys=keys, chunk_tokens=chunk_tokens)
    ((logp * mask).sum() - 0.3 * (ent * mask).sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), ent.detach(), mask, grads


@pytest.mark.parametrize("keys", [None, ["a", "a", "b", "a"]], ids=["plain", "shared-prefix"])
def test_chunked_head_equals_the_whole_logits(policy, keys, monkeypatch):
    monkeypatch.setattr("agents.prefix.MIN_TOKEN_SAVING", float("-inf"))   # share even where it saves little
    model, tok = policy
    assert plain_lm_head(model) is not None
    lp0, ent0, mask0, g0 = _score(model, tok, chunk_tokens=0, keys=keys)
    lp1, ent1, mask1, g1 = _score(model, tok, chunk_tokens=3, keys=keys)     # several chunks
    m = mask0.bool()
    assert torch.equal(mask0, mask1) and m.sum() == 13
    assert torch.allclose(lp1[m], lp0[m], atol=1e-5, rtol=1e-5)
    assert torch.allclose(ent1[m], ent0[m], atol=1e-4, rtol=1e-5)
    assert (lp1[~m] == 0).all() and (ent1[~m] == 0).all()
    assert g0.keys() == g1.keys() and len(g0) > 0
    for name in g0:
        # float32 sums in another order through 30 blocks' backward: ~3e-4 of the gradient's norm on one
        # CPU (AMD EPYC), beyond a per-element 1e-4 there; a wrong chunk or mask is off by O(1)
        err = torch.linalg.vector_norm(g1[name] - g0[name]) / torch.linalg.vector_norm(g0[name])
        assert err < 2e-3, (name, float(err))


def test_chunked_head_without_grad_and_without_entropy(policy):
    model, tok = policy
    prompts = _prompts(tok)
    responses = [p[-2:] for p in prompts]
    with torch.no_grad():
        lp0, _, mask = response_logprobs(model, prompts, responses, tok.pad_token_id, with_entropy=False,
                                         chunk_tokens=0)
        lp1, ent, _ = response_logprobs(model, prompts, responses, tok.pad_token_id, with_entropy=False,
                                        chunk_tokens=1)
    assert ent is None
    assert torch.allclose(lp1, lp0 * mask, atol=1e-5)


def test_soft_capped_heads_keep_the_whole_logits_path(policy):
    model, _ = policy
    cfg = model.get_base_model().config
    cfg.final_logit_softcapping = 30.0
    try:
        assert plain_lm_head(model) is None
    finally:
        del cfg.final_logit_softcapping


def test_phase_memory_is_silent_off_cuda():
    memory = PhaseMemory("cpu")
    with memory.phase("rollout"):
        torch.ones(10)
    assert memory.take() == {}
    assert progress_text({"loss": 1.0}) is None


def test_phase_memory_columns_from_the_cuda_counters(monkeypatch):
    """CUDA cannot run here: its four counters are replaced; the phase bookkeeping is what is tested."""
    state = {"peak": 0}
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: state.update(peak=0))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: state["peak"])
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: 2 * state["peak"])
    memory = PhaseMemory("cuda")
    with memory.phase("rollout"):
        state["peak"] = 3 * 2 ** 30
    with memory.phase("update"):        # each phase starts from a reset counter
        state["peak"] += 2 ** 29
    cols = memory.take()
    assert cols == {"mem_rollout_alloc_gib": 3.0, "mem_rollout_reserved_gib": 6.0,
                    "mem_update_alloc_gib": 0.5, "mem_update_reserved_gib": 1.0}
    assert progress_text(cols) == "3.0/6.0G"
    assert memory.take() == {}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_trainer_logs_each_phase_memory_on_cuda(tmp_path):
    import csv
    from agents.config import TrainConfig
    from agents.trainer import Trainer
    cfg = TrainConfig(env="textcraft", model="tiny", estimator="gigpo", device="cuda", iterations=1,
                      batch_tasks=2, group_size=2, max_steps=2, max_new_tokens=8, eval_before=False,
                      eval_tasks=2, eval_batch=2, tensorboard=False, progress=False, old_logprobs="recompute",
                      out_dir=str(tmp_path))
    Trainer(cfg).train()
    row = next(csv.DictReader(open(tmp_path / "train.csv")))
    for phase in ("rollout", "old_logprobs", "update"):
        alloc, reserved = float(row[f"mem_{phase}_alloc_gib"]), float(row[f"mem_{phase}_reserved_gib"])
        assert 0 < alloc <= reserved
