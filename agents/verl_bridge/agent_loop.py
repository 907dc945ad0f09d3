"""``bipace_env``: a verl agent loop that plays one bipace env episode through verl's LLM server.

Registered with verl (``@register("bipace_env")``; workers in other processes find it through
``config/agent_loop.yaml``, passed as ``actor_rollout_ref.rollout.agent.agent_loop_config_path``).
Each dataset row names an env and a task (``extra_info``: ``env``, ``env_kwargs`` JSON, ``task_id``
JSON, ``seed``; written by ``agents.verl_bridge.dataset``); verl runs ``rollout.n`` sessions of it, the
rollout group, all with verl's ``uid``. A session resets the env, then each turn renders our prompt
(``agents.prompts``), asks the server for one answer, parses it (``agents.parsing``) and steps the env,
until the episode ends or ``max_steps``.

Layout: one sample per step. ``run`` returns a list of ``AgentLoopOutput``, one per turn, each with that
turn's own prompt (rebuilt every step with the compact history, exactly as ``bipace-train`` and
verl-agent do) and the turn's response, plus the step fields of ``steps.STEP_KEYS`` in
``extra_fields``. verl 0.9.1's default trainer (V1, TransferQueue: ``AgentLoopWorkerTQ``) stores
every output of a list as its own sample (key ``{uid}_{session}_{i}``). We chose it over one sample per
trajectory with per-turn response masks because our prompts are not a growing chat: in one sequence,
turn t's tokens would be scored by the actor given every earlier prompt and answer, not the prompt the
server sampled them from, so the PPO ratio would be off-policy from the first update, and the sequence
would grow to max_steps x (prompt + answer) tokens (about 50 x 700 on ALFWorld). The legacy V0 trainer
(``trainer.use_v1=false``) takes one output per run and is not supported.

The episode return goes to every step sample as ``reward_score`` (verl's ``rm_scores``, read by verl's
own estimators and metrics); our estimators read the per-step rewards in the step fields instead.
"""
from __future__ import annotations

import json
import time
from typing import Any
from uuid import uuid4

import gymnasium as gym
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from agents.envs import ENV_SPECS, get_env_spec
from agents.parsing import parse_action
from agents.prompts import PromptSettings, make_prompter
from agents.verl_bridge.steps import step_fields
from estimators import action_key


def env_spec_of(env: str):
    """Our EnvSpec from an env name ('alfworld') or its gym id ('bipace/ALFWorld-v0')."""
    for spec in ENV_SPECS.values():
        if env == spec.gym_id:
            return spec
    return get_env_spec(env)


def _json_field(value, name: str):
    if value is None or isinstance(value, (dict, list, int)):
        return value
    try:
        return json.loads(value)
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"dataset field {name}={value!r} must be JSON (write the rows with "
                         "agents.verl_bridge.dataset)") from exc


def task_of(kwargs: dict) -> dict:
    """env name, env kwargs, task id and seed of a dataset row (top-level columns win over extra_info)."""
    extra = dict(kwargs.get("extra_info") or {})
    pick = {k: kwargs[k] if k in kwargs else extra.get(k) for k in ("env", "env_kwargs", "task_id", "seed")}
    if not pick["env"]:
        raise ValueError("the dataset row names no env: put env (e.g. 'alfworld' or 'bipace/ALFWorld-v0') in "
                         "its extra_info, as agents.verl_bridge.dataset writes it")
    env_kwargs = _json_field(pick["env_kwargs"], "env_kwargs") or {}
    if not isinstance(env_kwargs, dict):
        raise ValueError(f"env_kwargs must be a JSON object; got {pick['env_kwargs']!r}")
    return {"env": str(pick["env"]), "env_kwargs": env_kwargs,
            "task_id": _json_field(pick["task_id"], "task_id"),
            "seed": None if pick["seed"] is None else int(pick["seed"])}


@register("bipace_env")
class BipaceEnvAgentLoop(AgentLoopBase):
    """One env episode per ``run``; options come from the agent loop config entry (see config/)."""

    def __init__(self, *args, max_steps: int | None = None, history_length: int = 2, history_chars: int = 0,
                 require_think: bool = True, compact: bool = False, key_kind: str = "action_tag",
                 system: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.max_steps, self.key_kind = max_steps, key_kind
        self.prompt_settings = PromptSettings(history_length=history_length, history_chars=history_chars,
                                              require_think=require_think,
                                              compact=compact, **({"system": system} if system else {}))
        self.response_length = self.rollout_config.response_length

    async def _call(self, fn, *args, **kw):
        # env resets and steps block (ALFWorld's engine takes ~0.1 s): keep the event loop free for the
        # other sessions' generate calls
        return await self.loop.run_in_executor(None, lambda: fn(*args, **kw))

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> list[AgentLoopOutput]:
        task = task_of(kwargs)
        spec = env_spec_of(task["env"])
        group = str(kwargs.get("uid", uuid4().hex))
        traj = f"{group}_{kwargs['session_id']}" if "session_id" in kwargs else uuid4().hex
        max_steps = int(kwargs.get("max_steps") or self.max_steps or spec.max_steps)
        prompter = make_prompter(spec.name, self.prompt_settings)
        env = await self._call(_make_env, spec.gym_id, task["env_kwargs"])
        outputs: list[AgentLoopOutput] = []
        ret, won = 0.0, False
        try:
            options = {} if task["task_id"] is None else {"task_id": task["task_id"]}
            obs, info = await self._call(env.reset, seed=task["seed"], options=options)
            prompter.reset(0, obs, info)
            for t in range(max_steps):
                prompt_ids = await self.ct_build_initial_tokens(prompter.messages(0, obs, info))
                t0 = time.perf_counter()
                out = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=prompt_ids,
                                                         sampling_params=sampling_params)
                gen_s = time.perf_counter() - t0
                resp = list(out.token_ids)[:self.response_length]
                text = self.tokenizer.decode(resp, skip_special_tokens=True)
                action, valid = parse_action(text, self.prompt_settings.require_think,
                                             prompter.fallback_chars)
                nxt, raw, term, trunc, nxt_info = await self._call(env.step, action)
                reward = float(spec.reward_map(float(raw), bool(term), nxt_info))
                key = action_key(response_text=text, response_ids=resp, kind=self.key_kind,
                                 projected_action=action)
                fields = server_fields(out, kwargs.get("global_steps"))
                anchor = info.get("anchor", obs)
                fields.update(step_fields(group, traj, t, reward, valid, anchor, key, action))
                fields.update(turn_scores=[], tool_rewards=[])     # the keys verl's own loops always set
                logp = list(out.log_probs)[:len(resp)] if out.log_probs else None
                outputs.append(AgentLoopOutput(
                    prompt_ids=prompt_ids, response_ids=resp, response_mask=[1] * len(resp),
                    response_logprobs=logp, num_turns=2, extra_fields=fields,
                    metrics={"generate_sequences": gen_s,
                             "num_preempted": -1 if out.num_preempted is None else out.num_preempted}))
                prompter.record(0, obs, action)
                ret += reward
                obs, info = nxt, nxt_info
                if term or trunc:
                    won = bool(nxt_info.get("won", False))
                    break
        finally:
            await self._call(env.close)
        info_out = {"won": float(won), "episode_return": ret, "episode_length": float(len(outputs))}
        for o in outputs:
            o.reward_score = ret
            o.extra_fields["reward_extra_info"] = dict(info_out)
        return outputs


def server_fields(out, global_steps=None) -> dict:
    """The extra fields the LLM server reported with an answer (``global_steps``, the weights version it
    answered with), plus ``min_global_steps``/``max_global_steps`` of this sample: verl's V1 worker tags
    each stored sample with them and its ``_compute_metrics`` makes them an int array, so a sample
    without them fails the step after its update. A step sample's tokens come from one call, so both are
    that call's version (verl's ``LLMServerClient.generate`` sets them so too); a server that reports
    none gets the version of the batch the row came in (the ``global_steps`` verl passes every run)."""
    fields = dict(out.extra_fields or {})
    version = fields.get("global_steps")
    if version is None:
        version = global_steps
    for key in ("min_global_steps", "max_global_steps"):
        if fields.get(key) is None:
            fields[key] = version
    if fields["min_global_steps"] is None:
        raise ValueError("the LLM server reported no global_steps with its answer and the row carries none: "
                         "verl's trainer needs the weights version of every sample")
    return fields


def _make_env(gym_id: str, env_kwargs: dict):
    import bipace_envs  # noqa: F401  (registers the gym ids)
    return gym.make(gym_id, **env_kwargs)
