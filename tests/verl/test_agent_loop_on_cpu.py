"""The bipace_env agent loop against a scripted async LLM server, on TextCraft, WebShop and ALFWorld (CPU,
in the manner of verl's ``*_on_cpu`` tests): the server answers with the env expert's plan, so each
episode is won at its last step, and every step comes back as its own sample with our prompt, the
server's tokens and the step fields."""
from __future__ import annotations

import asyncio
import json
import types

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from agents.envs import get_env_spec  # noqa: E402
from agents.prompts import PromptSettings, make_prompter  # noqa: E402
from agents.verl_bridge.agent_loop import BipaceEnvAgentLoop, _make_env, task_of  # noqa: E402
from agents.verl_bridge.steps import STEP_KEYS, anchor_hash  # noqa: E402


class ScriptedServer:
    """verl's LLMServerClient.generate with scripted answers; records every prompt it was sent."""

    def __init__(self, tokenizer, answers, global_steps=None):
        self.tok, self.answers, self.prompts, self.responses = tokenizer, list(answers), [], []
        self.global_steps = global_steps

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        text = self.answers[min(len(self.prompts), len(self.answers) - 1)]
        self.prompts.append(list(prompt_ids))
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        self.responses.append(ids)
        await asyncio.sleep(0)
        # what verl's LLMServerClient.generate returns: the server's weights version, and min/max from it
        extra = ({} if self.global_steps is None else
                 {"global_steps": self.global_steps, "min_global_steps": self.global_steps,
                  "max_global_steps": self.global_steps})
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), extra_fields=extra)


def play(tok, server, row, sessions=1, global_steps=1, **opts):
    """Run the loop as verl's worker does: one instance per session, built inside the running event loop."""
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 8192, "response_length": 96}}})

    async def main():
        out = []
        for s in range(sessions):
            loop = BipaceEnvAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server,
                                      tokenizer=tok, processor=None, dataset_cls=None,
                                      data_config=DictConfigWrap(OmegaConf.create({})), **opts)
            out.append(await loop.run({"temperature": 1.0}, uid="u1", session_id=s, extra_info=row,
                                      global_steps=global_steps))
        return out
    return asyncio.run(main())


def expert_episode(row):
    """The expert's actions on the row's task, and the first observation/info (what step 0 is shown)."""
    task = task_of({"extra_info": row})
    spec = get_env_spec(task["env"])
    env = _make_env(spec.gym_id, task["env_kwargs"])
    try:
        options = {"task_id": task["task_id"], **spec.expert_reset_options}
        obs, info = env.reset(seed=task["seed"], options=options)
        first, actions = (obs, info), []
        for _ in range(40):
            action = spec.expert(env)[0]
            actions.append(action)
            _, _, term, trunc, last = env.step(action)
            if term or trunc:
                break
        assert last.get("won"), "the expert should win the chosen task"
        return first, actions
    finally:
        env.close()


def _row(name, env_kwargs, split=None):
    spec = get_env_spec(name)
    env = _make_env(spec.gym_id, env_kwargs)
    try:
        task = spec.tasks(env, split or "train")[0]
    finally:
        env.close()
    return {"env": name, "env_kwargs": json.dumps(env_kwargs), "task_id": json.dumps(task), "seed": 0}


@pytest.fixture(params=["textcraft", "webshop", "alfworld"])
def env_row(request, shared_dir):
    if request.param == "textcraft":
        return _row("textcraft", {"depths": [1, 2], "max_steps": 30})
    if request.param == "webshop":
        kw = {"data_dir": str(shared_dir / "data/webshop-fixture"), "verify_hashes": False, "split": "all"}
        return _row("webshop", kw, "all")
    pytest.importorskip("alfworld")
    return _row("alfworld", {"data_dir": str(shared_dir / "data/alfworld"), "split": "valid_unseen"},
                "valid_unseen")


def test_expert_script_wins_with_one_sample_per_step(tiny, env_row):
    _, tok = tiny
    (obs0, info0), plan = expert_episode(env_row)
    answers = [f"<think>next</think><action>{a}</action>" for a in plan]
    server = ScriptedServer(tok, answers)
    (outs,) = play(tok, server, env_row)
    assert len(outs) == len(plan) == len(server.prompts)
    steps = [o.extra_fields for o in outs]
    assert [s["bipace_step"] for s in steps] == list(range(len(plan)))
    assert {s["bipace_group"] for s in steps} == {"u1"} and {s["bipace_traj"] for s in steps} == {"u1_0"}
    assert all(s["bipace_valid"] for s in steps)
    assert [s["bipace_reward"] for s in steps] == [0.0] * (len(plan) - 1) + [10.0]
    assert all(o.reward_score == 10.0 and o.extra_fields["reward_extra_info"]["won"] == 1.0 for o in outs)
    assert all(set(STEP_KEYS) <= set(s) for s in steps)
    # what verl's V1 worker stores per sample (AgentLoopOutput.as_dict): the return at the last token
    stored = outs[0].as_dict()
    assert stored["rm_scores"].tolist() == [0.0] * (len(server.responses[0]) - 1) + [10.0]
    assert stored["extra_fields"]["bipace_step"] == 0 and "reward_extra_info" in stored["extra_fields"]
    # the sample is what the server saw and said: the prompt it was sent, its tokens and log-probs
    for o, p, r in zip(outs, server.prompts, server.responses):
        assert o.prompt_ids == p and o.response_ids == r and o.response_mask == [1] * len(r)
        assert o.response_logprobs == [-0.25] * len(r)
    # step 0's prompt is our template for the env's first observation, in the model's chat format
    prompter = make_prompter(env_row["env"], PromptSettings())
    prompter.reset(0, obs0, info0)
    expected = tok.apply_chat_template(prompter.messages(0, obs0, info0), tokenize=False,
                                       add_generation_prompt=True)
    assert tok.decode(outs[0].prompt_ids) == expected
    assert steps[0]["bipace_anchor"] == anchor_hash(info0["anchor"])
    # PACE keys come from the parsed action ('action_tag'): the same action gives the same key
    assert steps[0]["bipace_action_key"] != steps[-1]["bipace_action_key"] or plan[0] == plan[-1]


def test_bad_answers_are_invalid_and_the_episode_stops_at_max_steps(tiny):
    _, tok = tiny
    row = _row("textcraft", {"depths": [1, 2], "max_steps": 30})
    server = ScriptedServer(tok, ["I would like to craft something"])
    a, b = play(tok, server, row, sessions=2, max_steps=3)
    assert len(a) == len(b) == 3
    assert not any(o.extra_fields["bipace_valid"] for o in a + b)
    assert all(o.reward_score == 0.0 for o in a + b)
    # two sessions of one row: one group, two trajectories, the same start state
    assert {o.extra_fields["bipace_traj"] for o in a + b} == {"u1_0", "u1_1"}
    assert a[0].extra_fields["bipace_anchor"] == b[0].extra_fields["bipace_anchor"]
    # the history template names the earlier (fallback) action from step 1 on
    assert "something" in tok.decode(a[1].prompt_ids) and "Prior to this step" in tok.decode(a[1].prompt_ids)


def test_loop_is_registered_and_rows_must_name_an_env(tiny):
    assert _agent_loop_registry["bipace_env"]["_target_"].endswith("agent_loop.BipaceEnvAgentLoop")
    with pytest.raises(ValueError, match="names no env"):
        task_of({"extra_info": {"task_id": "1"}})
    with pytest.raises(ValueError, match="must be JSON"):
        task_of({"extra_info": {"env": "textcraft", "env_kwargs": "{depths"}})
    with pytest.raises(ValueError, match="unknown env 'minecraft'"):
        play(tiny[1], ScriptedServer(tiny[1], ["x"]), {"env": "minecraft"})


class StoreTQ:
    """TransferQueue's calls on this path over a per-sample in-memory store (as TransferQueue keeps them)."""

    def __init__(self):
        self.samples, self.tags = {}, {}

    async def async_kv_batch_put(self, keys, fields, tags, partition_id):
        cols = {}
        for name in fields.keys():
            value = fields.get(name)
            cols[name] = (value.unbind() if getattr(value, "is_nested", False) else
                          list(value) if isinstance(value, torch.Tensor) else value.tolist())
        for i, key in enumerate(keys):
            self.samples[key] = {name: col[i] for name, col in cols.items()}
            self.tags[key] = tags[i]

    def kv_batch_get(self, keys, partition_id, select_fields):
        td = list_of_dict_to_tensordict([{f: self.samples[k][f] for f in select_fields
                                          if f in self.samples[k]} for k in keys])
        for name in list(td.keys()):      # per-sample sequences come back jagged, equal lengths or not
            value = td.get(name)
            if isinstance(value, torch.Tensor) and not value.is_nested and value.dim() >= 2:
                td[name] = torch.nested.as_nested_tensor(list(value), layout=torch.jagged)
        return td

    def kv_batch_put(self, keys, partition_id, fields):
        for i, key in enumerate(keys):
            self.samples[key].update({name: fields[name][i] for name in fields.keys()})


def test_step_samples_go_through_verls_postprocess_and_step_metrics(tiny, monkeypatch):
    """Our outputs through verl's own V1 code: ``AgentLoopWorkerTQ._agent_loop_postprocess`` stores them
    (tags with min/max_global_steps), then ``PPOTrainer._compute_metrics`` computes the step's metrics,
    which made a list of None an int array (TypeError) when the loop dropped the server's fields."""
    from verl.trainer.ppo.v1 import agent_loop_tq, trainer_base
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
    _, tok = tiny
    row = _row("textcraft", {"depths": [1, 2], "max_steps": 30})
    outs = play(tok, ScriptedServer(tok, ["<action>look</action>"], global_steps=3), row, sessions=2,
                global_steps=4, max_steps=2)
    store = StoreTQ()
    monkeypatch.setattr(agent_loop_tq, "tq", store)
    monkeypatch.setattr(trainer_base, "tq", store)
    worker_cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__     # the class under ray.remote
    worker = worker_cls.__new__(worker_cls)
    worker.reward_loop_worker_handles, worker.processor, worker.distillation_enabled = None, None, False
    for session, out in enumerate(outs):
        asyncio.run(worker._agent_loop_postprocess(out, False, uid="u1", session_id=session, global_steps=4))
    keys = sorted(store.samples)
    assert keys == ["u1_0_0", "u1_0_1", "u1_1_0", "u1_1_1"]          # one sample per step
    assert {store.tags[k]["min_global_steps"] for k in keys} == {3}
    for k in keys:      # what the advantage step writes before the metrics
        store.samples[k]["advantages"] = torch.zeros(len(store.samples[k]["responses"]))
        store.samples[k]["returns"] = store.samples[k]["advantages"]
    trainer = PPOTrainerSync.__new__(PPOTrainerSync)
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {}, "model": {}}})
    trainer.use_critic, trainer._rollout_moe_lb_metrics_accumulator = False, None
    trainer._get_n_gpus_for_throughput = lambda: 1
    batch = types.SimpleNamespace(keys=keys, tags=[store.tags[k] for k in keys], partition_id="train")
    metrics = {}
    trainer._compute_metrics(batch, metrics, timing_raw={"step": 1.0, "gen": 0.5}, global_steps=4, epoch=0)
    assert metrics["training/off_policy/trajectory_staleness/mean"] == 0      # step 4 trains on version 3
    assert metrics["training/off_policy/trajectory_spans/max"] == 1
    assert metrics["response_length/mean"] > 0 and metrics["training/num_turns/mean"] == 2
