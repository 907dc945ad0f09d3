"""The bipace_env agent loop against a scripted async LLM server, on TextCraft, WebShop and ALFWorld (CPU,
in the manner of verl's ``*_on_cpu`` tests): the server answers with the env expert's plan, so each
episode is won at its last step, and every step comes back as its own sample with our prompt, the
server's tokens and the step fields."""
from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("verl", reason="needs the [verl] extra: pip install -e \".[verl]\"")
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, _agent_loop_registry  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from agents.envs import get_env_spec  # noqa: E402
from agents.prompts import PromptSettings, make_prompter  # noqa: E402
from agents.verl_bridge.agent_loop import BipaceEnvAgentLoop, _make_env, task_of  # noqa: E402
from agents.verl_bridge.steps import STEP_KEYS, anchor_hash  # noqa: E402


class ScriptedServer:
    """verl's LLMServerClient.generate with scripted answers; records every prompt it was sent."""

    def __init__(self, tokenizer, answers):
        self.tok, self.answers, self.prompts, self.responses = tokenizer, list(answers), [], []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        text = self.answers[min(len(self.prompts), len(self.answers) - 1)]
        self.prompts.append(list(prompt_ids))
        ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        self.responses.append(ids)
        await asyncio.sleep(0)
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids))


def play(tok, server, row, sessions=1, **opts):
    """Run the loop as verl's worker does: one instance per session, built inside the running event loop."""
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 8192, "response_length": 96}}})

    async def main():
        out = []
        for s in range(sessions):
            loop = BipaceEnvAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server,
                                      tokenizer=tok, processor=None, dataset_cls=None,
                                      data_config=DictConfigWrap(OmegaConf.create({})), **opts)
            out.append(await loop.run({"temperature": 1.0}, uid="u1", session_id=s, extra_info=row))
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
