"""BiGPO's hidden state from verl's own old-log-prob path on CPU (tiny model), then the advantage step.

What runs is verl 0.9.1's code from the worker method down: ``BipaceActorRolloutRefWorker.
compute_log_prob`` -> verl's ``ActorRolloutRefWorker.compute_log_prob`` -> ``TrainingWorker.infer_batch``
(its defaults, eval context, output post-processing) -> ``FSDPEngineWithLMHead.infer_batch`` /
``forward_backward_batch`` (micro-batches, fixed size or dynamic bsz, and their reordering) ->
``forward_step`` (``prepare_model_inputs`` packed or padded, the model, ``prepare_model_outputs``), on
samples laid out as verl's V1 agent-loop worker stores them (``list_of_dict_to_tensordict`` of unpadded
prompt + response). Not exercised here: building the engine (``__init__``/``initialize``: FSDP
wrapping, device meshes; the engine object is made with ``__new__`` around the plain HF module), the
CUDA device helpers (patched to CPU), Ray dispatch and the TransferQueue (an in-memory stand-in, as in
test_advantages_on_cpu), Ulysses sequence parallelism across real ranks (its shard arithmetic is tested
on one process), LoRA, and verl's flash-attention patches (HF's sdpa packs the sequences here).
"""
from __future__ import annotations

import types
from contextlib import nullcontext

import numpy as np
import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import verl.utils.seqlen_balancing as seqlen_balancing  # noqa: E402
import verl.utils.torch_functional as verl_F  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402
from verl.workers import engine_workers  # noqa: E402
from verl.workers.config import FSDPEngineConfig  # noqa: E402
from verl.workers.engine.fsdp import transformer_impl  # noqa: E402
from verl.workers.engine_workers import ActorRolloutRefWorker, TrainingWorker  # noqa: E402

from agents.verl_bridge import trainer as bridge_trainer  # noqa: E402
from agents.verl_bridge.hidden import HiddenStateTap  # noqa: E402
from agents.verl_bridge.steps import EMBEDDING_KEY, anchor_hash, step_fields  # noqa: E402
from agents.verl_bridge.worker import (HIDDEN_CONFIG_KEY, BipaceActorRolloutRefWorker,  # noqa: E402
                                       EngineEmbeddingTap, micro_batch_positions)
from estimators import StepBatch, compute_advantages  # noqa: E402
from tests.verl.test_advantages_on_cpu import FakeTQ  # noqa: E402
from tests.verl.test_entry_on_cpu import example_config  # noqa: E402

# (group, trajectory, step, state, reward): two tasks x two episodes; the same state gets the same prompt,
# so its hidden state repeats and BiGPO's clusters hold several steps
EPISODES = [("t0", "t0_0", 0, "kitchen", 0.0), ("t0", "t0_0", 1, "fridge open", 10.0),
            ("t0", "t0_1", 0, "kitchen", 0.0), ("t0", "t0_1", 1, "sink", 0.0),
            ("t0", "t0_1", 2, "fridge open", 0.0),
            ("t1", "t1_0", 0, "garden", 0.0), ("t1", "t1_0", 1, "shed", 10.0),
            ("t1", "t1_1", 0, "garden", 0.0), ("t1", "t1_1", 1, "garden", 0.0),
            ("t1", "t1_1", 2, "shed", 0.0)]
ANSWERS = ["<action>open fridge 1</action>", "<think>hot</think><action>heat egg</action>",
           "<action>look</action>", "<action>go to sink 1</action>",
           "<think>x</think><action>take 1</action>"]


@pytest.fixture(scope="module")
def gloo(tmp_path_factory):
    """A one-process gloo group: verl's engine all-reduces token counts over its data-parallel group."""
    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('gloo')}/init", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def on_cpu(monkeypatch, gloo):
    """verl's device helpers assume an accelerator; point the ones on this path at the CPU."""
    monkeypatch.setattr(transformer_impl, "get_device_id", lambda: "cpu")
    monkeypatch.setattr(transformer_impl, "get_device_name", lambda: "cpu")
    monkeypatch.setattr(seqlen_balancing, "get_device_name", lambda: "cpu")
    no_cuda = types.SimpleNamespace(max_memory_allocated=lambda: 0, max_memory_reserved=lambda: 0)
    monkeypatch.setattr(engine_workers, "get_torch_device", lambda: no_cuda)


def samples(tok):
    """One V1 TransferQueue sample per step, as verl's AgentLoopWorkerTQ stores it (unpadded)."""
    out = []
    for i, (_, _, step, state, _) in enumerate(EPISODES):
        msgs = [{"role": "user", "content": f"You are in the {state}. Step {step}? Answer with an action."}]
        prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        prompt = prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt
        resp = tok(ANSWERS[i % len(ANSWERS)], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        p, r = torch.tensor(prompt), torch.tensor(resp)
        ids = torch.cat([p, r])
        out.append({"prompts": p, "responses": r, "response_mask": torch.ones_like(r),
                    "loss_mask": torch.ones_like(r), "input_ids": ids, "position_ids": torch.arange(len(ids)),
                    "attention_mask": torch.ones_like(ids)})
    return out


def make_worker(model, *, rmpad, dynamic, hidden):
    """verl's actor worker around an engine holding ``model``; only what construction would set."""
    engine = transformer_impl.FSDPEngineWithLMHead.__new__(transformer_impl.FSDPEngineWithLMHead)
    engine.module, engine.optimizer = model, None
    # 200 tokens: dynamic bsz packs 2-3 of these ~60-token samples per micro-batch, out of order
    engine.engine_config = FSDPEngineConfig(use_torch_compile=False, use_dynamic_bsz=dynamic,
                                            infer_max_token_len_per_gpu=200, infer_micro_batch_size_per_gpu=2)
    engine.ulysses_sequence_parallel_size, engine.use_ulysses_sp = 1, False
    engine.ulysses_device_mesh = engine.ulysses_parallel_group = None
    engine.pad_to_length, engine._autocast_dtype, engine.scaler = False, torch.float32, None
    engine._is_offload_param = engine._is_offload_optimizer = False
    engine.compute_entropy_from_logits = verl_F.entropy_from_logits
    actor = TrainingWorker.__new__(TrainingWorker)
    actor.engine, actor.engine_config = engine, engine.engine_config
    actor.model_config = {"use_remove_padding": rmpad}
    actor.loss_fn, actor.flops_counter, actor.device_name = None, None, "cpu"
    worker = BipaceActorRolloutRefWorker.__new__(BipaceActorRolloutRefWorker)
    worker.actor, worker.enable_routing_replay = actor, False
    worker.config = OmegaConf.create({HIDDEN_CONFIG_KEY: hidden} if hidden is not None else {})
    worker.install_embedding_tap()
    return worker


def old_log_prob_request(data, **extra):
    """What the trainer's ``_compute_old_log_prob`` puts in ``extra_info`` (the worker sees it as
    non-tensor data)."""
    tu.assign_non_tensor(data, calculate_entropy=True, compute_loss=False, temperature=1.0, **extra)
    return data


def direct(model, layer, sample):
    """One sample alone, unpadded: the hidden state at its last prompt token and its response log-probs."""
    with torch.no_grad():
        out = model(input_ids=sample["input_ids"][None], output_hidden_states=True)
    p = len(sample["prompts"])
    logp = torch.log_softmax(out.logits[0, p - 1:-1].float(), -1)
    logp = logp.gather(-1, sample["responses"][:, None])[:, 0]
    return out.hidden_states[layer][0, p - 1].float(), logp


def recorded_log_prob_pass(model, tok, *, rmpad, dynamic):
    """The samples, our worker's compute_log_prob output on them (default layer) and that layer."""
    model.eval()
    data = samples(tok)
    worker = make_worker(model, rmpad=rmpad, dynamic=dynamic, hidden={"layer": None})
    try:
        out = worker.compute_log_prob(old_log_prob_request(list_of_dict_to_tensordict(data)))
        return data, out, worker.bipace_tap.layer
    finally:
        worker.bipace_tap.remove()


@pytest.mark.parametrize("rmpad,dynamic", [(True, False), (True, True), (False, False), (False, True)],
                         ids=["packed", "packed-dynamic-bsz", "padded", "padded-dynamic-bsz"])
def test_old_log_prob_forward_returns_the_hidden_state_of_a_direct_forward(tiny, on_cpu, rmpad, dynamic):
    model, tok = tiny
    data, out, layer = recorded_log_prob_pass(model, tok, rmpad=rmpad, dynamic=dynamic)
    emb = out[EMBEDDING_KEY]
    assert emb.is_nested and len(emb.unbind()) == len(data)     # one per-sample vector, as TQ stores fields
    emb = torch.stack(list(emb.unbind()))
    assert emb.dtype == torch.float32 and emb.shape == (len(data), model.config.hidden_size)
    assert layer == -3          # 4 blocks: BiPACE's -12-of-28 depth
    for i, s in enumerate(data):
        want_h, want_logp = direct(model, layer, s)
        torch.testing.assert_close(emb[i], want_h, atol=1e-5, rtol=1e-4)
        # the log-probs of the same call are right too: the packing kept the samples apart
        got_logp = out["log_probs"].unbind()[i][len(s["prompts"]) - 1:-1]
        torch.testing.assert_close(got_logp, want_logp, atol=1e-5, rtol=1e-4)
    # the same state (same prompt) gives the same vector, a different one another
    torch.testing.assert_close(emb[0], emb[2], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(emb[0], emb[5], atol=1e-3)


def test_only_the_policys_old_log_prob_pass_records(tiny, on_cpu):
    model, tok = tiny
    model.eval()
    data = samples(tok)[:4]
    worker = make_worker(model, rmpad=True, dynamic=False, hidden={"layer": 2})
    try:
        assert worker.bipace_tap.layer == 2
        # a LoRA run's reference log-probs go through the same method with the adapter off (this model
        # has none: verl's switch is a no-op here)
        worker.actor.engine.disable_adapter = nullcontext
        request = old_log_prob_request(list_of_dict_to_tensordict(data), no_lora_adapter=True)
        ref = worker.compute_log_prob(request)
        assert EMBEDDING_KEY not in ref.keys() and "log_probs" in ref.keys()
        # outside compute_log_prob (e.g. the actor update's forwards) the engine step is verl's own
        engine = worker.actor.engine
        batch = old_log_prob_request(list_of_dict_to_tensordict(data), use_remove_padding=True,
                                     use_dynamic_bsz=False, micro_batch_size_per_gpu=2,
                                     use_fused_kernels=False)
        plain = engine.infer_batch(batch, loss_function=None)
        assert EMBEDDING_KEY not in plain["model_output"]
        out = worker.compute_log_prob(old_log_prob_request(list_of_dict_to_tensordict(data)))
        want = torch.stack([direct(model, 2, s)[0] for s in data])
        torch.testing.assert_close(torch.stack(list(out[EMBEDDING_KEY].unbind())), want, atol=1e-5, rtol=1e-4)
    finally:
        worker.bipace_tap.remove()
    assert engine.forward_step.__func__ is transformer_impl.FSDPEngineWithLMHead.forward_step
    # no bipace_hidden in the config (an estimator without embeddings): verl's worker, no tap
    assert make_worker(model, rmpad=True, dynamic=False, hidden=None).bipace_tap is None
    with pytest.raises(ValueError, match="strategy=fsdp"):     # e.g. megatron: not wired
        EngineEmbeddingTap(types.SimpleNamespace(module=model, forward_step=None))


def test_sequence_parallel_shards_give_every_rank_all_rows(tiny):
    """Ulysses: each sp rank's blocks see an equal slice of the packed sequence; the rows each keeps,
    summed over the group (what the all-reduce does), are the rows of the whole sequence."""
    model, _ = tiny
    tap = HiddenStateTap(model, -2)
    try:
        h = torch.randn(1, 12, model.config.hidden_size)
        rows, cols = torch.zeros(4, dtype=torch.long), torch.tensor([2, 5, 6, 11])
        parts = []
        for rank in range(3):                       # sp = 3: columns [0, 4), [4, 8), [8, 12)
            with tap.capture((rows, cols), shard=(rank, None)):
                tap._hook(None, None, (h[:, 4 * rank:4 * rank + 4],))
                parts.append(tap.value)
        torch.testing.assert_close(sum(parts), h[0, cols])
        assert (parts[0][1:] == 0).all() and (parts[2][:3] == 0).all()
    finally:
        tap.remove()


def test_positions_use_each_samples_own_prompt_length(tiny):
    _, tok = tiny
    data = list_of_dict_to_tensordict(samples(tok)[:3])
    lens = [len(s["prompts"]) for s in samples(tok)[:3]]
    seq = [len(s["input_ids"]) for s in samples(tok)[:3]]
    rows, cols = micro_batch_positions(data, use_remove_padding=True)
    assert rows.tolist() == [0, 0, 0]
    assert cols.tolist() == [lens[0] - 1, seq[0] + lens[1] - 1, seq[0] + seq[1] + lens[2] - 1]
    rows, cols = micro_batch_positions(data, use_remove_padding=False)
    assert rows.tolist() == [0, 1, 2] and cols.tolist() == [n - 1 for n in lens]
    del data["prompts"]                              # fall back on sequence minus response
    assert micro_batch_positions(data, use_remove_padding=False)[1].tolist() == [n - 1 for n in lens]


def test_advantage_step_on_captured_embeddings_equals_compute_advantages(tiny, on_cpu, monkeypatch):
    """The worker's output (as the TransferQueue would hold it) through the bipace_sync advantage step
    gives the advantages of compute_advantages(batch, 'bipace') with direct-forward embeddings."""
    model, tok = tiny
    data, out, layer = recorded_log_prob_pass(model, tok, rmpad=True, dynamic=True)
    fields = [step_fields(g, tr, st, rw, True, state, ANSWERS[i % len(ANSWERS)])
              for i, (g, tr, st, state, rw) in enumerate(EPISODES)]
    store = [{"response_mask": s["response_mask"], EMBEDDING_KEY: out[EMBEDDING_KEY].unbind()[i],
              "extra_fields": fields[i]} for i, s in enumerate(data)]
    fake = FakeTQ(store)
    monkeypatch.setattr(bridge_trainer, "tq", fake)
    trainer = bridge_trainer.BipacePPOTrainer.__new__(bridge_trainer.BipacePPOTrainer)
    trainer.config = OmegaConf.create({"algorithm": {"adv_estimator": "bipace", "use_kl_in_reward": False},
                                       "bipace": {"estimator_options": {"gamma": 0.9}}})
    keys = list(fake.store)
    meta = types.SimpleNamespace(keys=keys, tags=[{} for _ in keys], partition_id="train")
    trainer._compute_advantage(meta, {})

    anchors, akeys = np.empty(len(data), dtype=object), np.empty(len(data), dtype=object)
    anchors[:] = [anchor_hash(e[3]) for e in EPISODES]
    akeys[:] = [ANSWERS[i % len(ANSWERS)] for i in range(len(data))]
    batch = StepBatch(group_id=[e[0] for e in EPISODES], traj_id=[e[1] for e in EPISODES],
                      step_idx=[e[2] for e in EPISODES], reward=[e[4] for e in EPISODES],
                      action_valid=[True] * len(data), anchor=anchors, action_key=akeys,
                      embedding=torch.stack([direct(model, layer, s)[0] for s in data]).numpy())
    want = compute_advantages(batch, "bipace", gamma=0.9)
    got = np.array([fake.put[k]["advantages"][0].item() for k in keys])
    for k, s in zip(keys, data):          # one value per response token
        assert fake.put[k]["advantages"].shape == s["responses"].shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(want).sum() > 0
    # the states carry weight: unrelated vectors in their place give other advantages
    batch.embedding = np.random.default_rng(0).normal(size=batch.embedding.shape).astype(np.float32)
    assert not np.allclose(compute_advantages(batch, "bipace", gamma=0.9), want)


def test_trainer_swaps_in_the_recording_worker_only_when_needed():
    def actor_cls(trainer):
        (cls,) = [c for r, c in trainer.role_worker_mapping.items() if "actor" in str(r).lower()]
        return cls.__ray_actor_class__

    for name, layer, want_cls in (("bipace", None, BipaceActorRolloutRefWorker),
                                  ("bigpo", 17, BipaceActorRolloutRefWorker),
                                  ("gigpo", None, ActorRolloutRefWorker)):
        overrides = [f"algorithm.adv_estimator={name}"] + ([f"+bipace.hidden_layer={layer}"] if layer else [])
        trainer = bridge_trainer.BipacePPOTrainer.__new__(bridge_trainer.BipacePPOTrainer)
        trainer.config = example_config(*overrides)
        trainer._init_resource_pool_mgr()
        assert actor_cls(trainer) is want_cls
        hidden = trainer.config.actor_rollout_ref.get(HIDDEN_CONFIG_KEY)
        assert (hidden is None) if want_cls is ActorRolloutRefWorker else (hidden.layer == layer)
    trainer = bridge_trainer.BipacePPOTrainer.__new__(bridge_trainer.BipacePPOTrainer)
    trainer.config = example_config("algorithm.adv_estimator=bipace",
                                    "algorithm.rollout_correction.bypass_mode=true")
    with pytest.raises(ValueError, match="bypass_mode=True skips that forward"):
        trainer._init_resource_pool_mgr()
