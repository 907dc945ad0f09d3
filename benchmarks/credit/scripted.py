"""A scripted stochastic policy's side of the credit benchmark (the policy itself, with the exact probability
of each action, is ``scripted_policy.py``): its screen, the batch every estimator sees, and Monte-Carlo
continuations from replayed states. No model calls in play, so the ground truth fits on 2 cores where
SmolLM2's does not (ALFWorld, WebShop).

    python -m benchmarks.credit.advantage_accuracy --cell alfworld-eps0.3 --out runs/aa_alf_03
    python -m benchmarks.credit.advantage_accuracy --preset webshop-table --policy scripted:0.3 --out runs/x

    saved = record_scripted_batch(trainer, policy, goals, seed, out)   # batch.pkl, as policy_play's
    play = ScriptedPlay(trainer, policy, seed, workers=2, recorded=recorded_suggestions(saved))

What the estimators see is what they would see from an LLM policy that wrote these actions: each row's
prompt is built by the preset's prompter (the same history, admissible list and instruction a policy would
read), its response is the prompter's answer form of the action (``expert_response``, the SFT target), its
PACE key comes from that response, and its BiGPO embedding is the preset model's hidden state for the
prompt at the preset's layer (``embed_episodes``: one teacher-forced forward per new prompt suffix, the KV
cache of the episode's previous prompt reused). ``old_logp_sum`` is the policy's exact log-probability of
the action, a filled template's fill included (``scripted_policy``). The hindsight log-probs of
HCAPO/RELACE need a model's view of the whole episode, so those two are not scored on scripted batches (the
report says why).

The policy's state is part of the state a continuation starts from: an expert may keep some (WebShop's
oracle, once no listed product is perfect, follows the goal product for the rest of the episode; ALFWorld's
handcoded expert counts its own steps). A continuation therefore replays its prefix asking the expert at
every state, as the batch did (``replay_with_policy``), and each answer must equal the suggestion the batch
recorded there, or the run stops naming env, task and step (``PolicyStateMismatch``).

ALFWorld's expert is alfworld's handcoded one; it tracks the random turns too, and only where its script
fails (about a third of pick_two games) does it fall back to Fast Downward, whose searches after each random
turn take seconds (one took 387 s on a real game). Its budget counts only the steps that took its own
suggestion (``bipace_envs/alfworld/expert.py``), so random turns do not hand long episodes to the planner.
The ALFWorld cells also set the env's ``planner_timeout``; past it the episode's remaining choices are
uniform over the admissible actions (logged as such). That makes the policy depend on the machine's speed
only in states whose plan takes longer than the timeout; the screen and the batch count the episodes that
reached one (``expert_timeouts`` in screen.json and the summary).

Env state is reached by replay (``agents.replay``), not restored: ALFWorld's engine state holds Fast
Downward's ctypes pointers (``copy.deepcopy`` refuses them), and TextCraft/WebShop replay in milliseconds.
ALFWorld's engine keeps every command text it derived, so a replayed step costs about half a new one
(``python -m benchmarks.speed.alfworld_step``). Continuations run in ``workers`` processes, each job on its
own random stream (``stream_seed(seed, "continuations", chunk, i)``), so results do not depend on how many
workers play them.
"""
from __future__ import annotations

import multiprocessing as mp
import pickle
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from agents.replay import ReplayDivergence
from benchmarks.credit.policy_play import batch_layout, stream_seed
from benchmarks.credit.scripted_policy import (ExpertCannotAct, ScriptedPolicy,  # noqa: F401 (re-exported)
                                               fill_webshop_search, parse_policy)

__all__ = ["ExpertCannotAct", "PolicyStateMismatch", "ScriptedPlay", "ScriptedPolicy", "embed_episodes",
           "fill_webshop_search", "parse_policy", "play_episode", "record_scripted_batch",
           "recorded_suggestions", "replay_with_policy", "screen_scripted"]


class PolicyStateMismatch(RuntimeError):
    """After replay, the scripted policy's expert suggests another action than it did in the batch."""


# ------------------------------------------------------------------------------------- playing
def replay_with_policy(env, spec, env_name: str, task, seed: int, reset_options: dict, replay,
                       recorded: tuple | None = None) -> tuple:
    """Reset to the episode's start and re-apply ``replay``'s actions, checking each observation hash, and
    ask the policy's expert at every replayed state, as the recorded episode did: an expert that keeps
    state (WebShop's oracle falls back to the goal product for the rest of an episode once it finds no
    perfect product) then holds the state it had there. With ``recorded`` (the batch's suggestion at each
    step) every answer must be the recorded one, else ``PolicyStateMismatch`` names env, task and step.
    Returns the (obs, info) of the state reached and how many suggestions were checked."""
    obs, info = env.reset(seed=int(seed), options={"task_id": task, **reset_options})
    checked = 0
    for k, action in enumerate(replay.actions):
        env.check(replay, k, info.get("anchor", obs), seed)
        plan = spec.expert(env)
        suggestion = plan[0] if plan else None
        if recorded is not None:
            if suggestion != recorded[k]:
                raise PolicyStateMismatch(
                    f"{env_name}: after replaying task {task!r} (env seed {seed}) to step {k}, the scripted "
                    f"policy's expert suggests {suggestion!r}, but it suggested {recorded[k]!r} there in the "
                    "batch: the continuation would follow another policy than the one that played. Whatever "
                    "state the expert keeps must be rebuilt by asking it along the prefix")
            checked += 1
        obs, _, terminated, truncated, info = env.step(action)
        if (terminated or truncated) and k < len(replay.actions) - 1:
            raise ReplayDivergence(f"replay of task {task!r} (seed {seed}) ended at step {k} of a recorded "
                                   f"{len(replay.actions)}-action prefix")
    if len(replay.anchors) > len(replay.actions):
        env.check(replay, len(replay.actions), info.get("anchor", obs), seed)
    return obs, info, checked


def play_episode(env, policy: ScriptedPolicy, env_name: str, spec, rng, task, seed: int, reset_options: dict,
                 replay=None, keep_states: bool = False, recorded: tuple | None = None,
                 exclude_first: str | None = None) -> dict:
    """One episode (from the state ``replay`` reaches, with the policy's state rebuilt by
    ``replay_with_policy``, ``recorded`` its check; its first action other than ``exclude_first``, if
    given) until it ends. Returns rewards (mapped), valid flags,
    won, the actions, their log-probabilities and the expert's suggestion at each state, the number of
    replayed suggestions checked, and with ``keep_states`` the (obs, info) each action was taken in and the
    reset's first (obs, info)."""
    checked = 0
    if replay is None:
        obs, info = env.reset(seed=int(seed), options={"task_id": task, **reset_options})
        first = (obs, info)
    else:
        obs, info, checked = replay_with_policy(env, spec, env_name, task, seed, reset_options, replay,
                                                recorded)
        first = None
    t0 = len(replay.actions) if replay is not None else 0
    out = {"rewards": [], "valid": [], "actions": [], "logp": [], "suggestions": [], "states": [],
           "won": False, "first": first, "checked": checked}
    for t in range(t0, 10 ** 6):
        where = f"for task {task!r} (env seed {seed}) at step {t}"
        if t0:
            where += f" (after a replayed prefix of {t0})"
        choice = policy.choose(env, info, rng, env_name, spec.expert, where,
                               exclude=exclude_first if t == t0 else None)
        if keep_states:
            out["states"].append((obs, info))
        obs, r, term, trunc, info = env.step(choice.action)
        out["rewards"].append(float(spec.reward_map(float(r), bool(term), info)))
        out["valid"].append(True)
        out["actions"].append(choice.action)
        out["logp"].append(choice.logp)
        out["suggestions"].append(choice.suggestion)
        if term or trunc:
            out["won"] = bool(info.get("won", False))
            out["expert_timed_out"] = bool(info.get("expert_timed_out", False))
            return out
    raise AssertionError("unreachable: every env truncates at its max_steps")


def wrapped_env(make_env):
    from agents.replay import ReplayPrefix
    return ReplayPrefix(make_env())


def screen_scripted(trainer, policy: ScriptedPolicy, tasks: list, repeats: int, seed: int, out: Path) -> dict:
    """Each candidate goal played ``repeats`` times (screen.json: wins per goal, as ``policy_play.screen``);
    a policy that wins nothing or everything is refused with an eps to try."""
    import json
    path = out / "screen.json"
    if path.exists():
        return json.loads(path.read_text())
    spec, env = trainer.spec, wrapped_env(trainer.make_env)
    by_task, timeouts, rng = {}, 0, np.random.default_rng(stream_seed(seed, "screen"))
    try:
        for task in tasks:
            eps = [play_episode(env, policy, trainer.cfg.env, spec, rng, task, int(rng.integers(2 ** 31)),
                                spec.expert_reset_options) for _ in range(repeats)]
            by_task[str(task)] = [sum(int(e["won"]) for e in eps), repeats]
            timeouts += sum(e["expert_timed_out"] for e in eps)
    finally:
        env.close()
    won = sum(w for w, _ in by_task.values()) / max(1, sum(n for _, n in by_task.values()))
    if won in (0.0, 1.0):
        hint = (f"lower eps, e.g. scripted:{policy.eps / 2:g}" if won == 0 else
                f"raise eps, e.g. scripted:{min(1.0, max(2 * policy.eps, policy.eps + 0.2)):g}")
        outcome = "won nothing" if won == 0 else "won everything"
        raise ValueError(f"the scripted policy {policy.spec} {outcome} "
                         f"in the screen ({len(tasks)} goals x {repeats}): every advantage would be "
                         f"{'zero' if won == 0 else 'about zero'}; {hint}")
    result = {"eval_success": won, "by_task": by_task, "expert_timeouts": timeouts}
    path.write_text(json.dumps(result))
    return result


# ------------------------------------------------------------------------------------- the batch
def record_scripted_batch(trainer, policy: ScriptedPolicy, goals: list, seed: int, out: Path) -> dict:
    """The batch every estimator sees (``out/batch.pkl``, the layout of ``policy_play.record_batch``): B goals
    x G scripted episodes, one env seed per goal, prompts, answers, keys and embeddings as described above."""
    path = out / "batch.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    import torch
    from agents.parsing import parse_action
    from agents.prompts import make_prompter
    from agents.rollout import Rollout
    from estimators import StepBatch, action_key
    c, spec, tok = trainer.cfg, trainer.spec, trainer.tok
    settings = c.rollout_settings(trainer.max_steps, True)
    tasks, seeds, groups = batch_layout(goals, c.group_size, seed)
    env, prompter = wrapped_env(trainer.make_env), make_prompter(c.env, trainer.prompt_settings)
    t0 = time.perf_counter()
    episodes = []
    try:
        for e, (task, s) in enumerate(zip(tasks, seeds)):
            erng = np.random.default_rng(stream_seed(seed, "batch", e))
            episodes.append(play_episode(env, policy, c.env, spec, erng, task, s, spec.expert_reset_options,
                                         keep_states=True))
    finally:
        env.close()
    play_s = time.perf_counter() - t0
    ro = Rollout(batch=None)
    cols = {k: [] for k in ("env", "step", "reward", "valid", "anchor", "key", "logp")}
    per_episode_prompts = []
    for e, ep in enumerate(episodes):
        prompter.reset(e, *ep["first"])
        prompts = []
        for t, ((obs, info), action) in enumerate(zip(ep["states"], ep["actions"])):
            text = tok.apply_chat_template(prompter.messages(e, obs, info), tokenize=False,
                                           add_generation_prompt=True)
            prompts.append(torch.tensor(tok(text, add_special_tokens=False)["input_ids"]))
            response = prompter.expert_response(action)
            parsed, valid = parse_action(response, settings.require_think, trainer.spec.fallback_chars)
            if parsed != action or not valid:
                raise RuntimeError(f"the {c.env} prompter's answer form {response!r} parses to {parsed!r}, "
                                   f"not {action!r}: the scripted rows would not be what a policy wrote")
            resp_ids = torch.tensor(tok(response, add_special_tokens=False)["input_ids"])
            prompter.record(e, obs, action)
            cols["env"].append(e)
            cols["step"].append(t)
            cols["reward"].append(ep["rewards"][t])
            cols["valid"].append(True)
            cols["anchor"].append(info.get("anchor", obs))
            cols["key"].append(action_key(response_text=response, response_ids=resp_ids.tolist(),
                                          kind=settings.key_kind, projected_action=action))
            cols["logp"].append(ep["logp"][t])
            ro.response_ids.append(resp_ids)
            ro.responses.append(response)
            ro.actions.append(action)
        per_episode_prompts.append(prompts)
        ro.prompt_ids += prompts
    t1 = time.perf_counter()
    embs = embed_episodes(trainer.model, settings.hidden_layer, per_episode_prompts, c.progress)
    embed_s = time.perf_counter() - t1
    # rows in time-major order, as a collector records them (estimators do not depend on it)
    order = np.lexsort((np.asarray(cols["env"]), np.asarray(cols["step"])))
    env_idx = np.asarray(cols["env"], dtype=np.int64)[order]
    obj = {}
    for name in ("anchor", "key"):
        obj[name] = np.empty(len(order), dtype=object)
        obj[name][:] = [cols[name][i] for i in order]
    ro.batch = StepBatch(group_id=groups[env_idx], traj_id=env_idx,
                         step_idx=np.asarray(cols["step"], dtype=np.int64)[order],
                         reward=np.asarray(cols["reward"], dtype=np.float64)[order],
                         action_valid=np.ones(len(order), dtype=bool), anchor=obj["anchor"],
                         action_key=obj["key"], embedding=np.concatenate(embs)[order],
                         resp_len=np.array([len(ro.response_ids[i]) for i in order], dtype=np.int64),
                         old_logp_sum=np.asarray(cols["logp"], dtype=np.float64)[order])
    for name in ("prompt_ids", "response_ids", "responses", "actions"):
        setattr(ro, name, [getattr(ro, name)[i] for i in order])
    ro.env_index = env_idx
    ro.success = np.array([ep["won"] for ep in episodes])
    ro.score = ro.success.astype(float)
    ro.episode_return = np.array([sum(ep["rewards"]) for ep in episodes])
    ro.episode_length = np.array([len(ep["rewards"]) for ep in episodes])
    ro.admissible = np.ones(len(order), dtype=bool)
    saved = {"ro": ro, "tasks": tasks, "seeds": seeds, "goals": goals,
             "suggestions": [tuple(ep["suggestions"]) for ep in episodes],
             "stats": {"rollout_s": play_s, "embed_s": embed_s, "policy": policy.spec,
                       "expert_timeouts": sum(ep["expert_timed_out"] for ep in episodes)}}
    path.write_bytes(pickle.dumps(saved))
    return saved


def embed_episodes(model, layer: int, episodes: list, progress: bool = False) -> list[np.ndarray]:
    """Per episode, the (T, H) unit-norm hidden states at ``layer`` (HF ``hidden_states`` index) of the last
    token of each prompt (a list of 1-D token tensors): the vector a rollout's ``HiddenCapture`` records. An
    episode's prompts mostly extend each other, so each forward runs only what a prompt adds to the longest
    prefix it shares with the previous one (the cache cropped back to it)."""
    import torch
    from agents.capture import HiddenCapture
    from agents.prefix import cache_kwarg, common_prefix_len, output_cache
    from tqdm.auto import tqdm
    capture, kwarg = HiddenCapture(model, layer), cache_kwarg(model)
    dev = next(model.parameters()).device
    out, was_training = [], model.training
    model.eval()
    try:
        with torch.no_grad():
            for prompts in tqdm(episodes, desc="embeddings", unit="episode", disable=not progress):
                cache, prev, vecs = None, None, []
                for p in prompts:
                    shared = 0 if prev is None else min(common_prefix_len([p, prev]), len(p) - 1)
                    if cache is not None and cache.get_seq_length() > shared:
                        cache.crop(shared - cache.get_seq_length())     # keep the shared prefix's columns
                    capture.arm()
                    res = model(input_ids=p[shared:][None].to(dev), use_cache=True, **{kwarg: cache})
                    cache, prev = output_cache(res), p
                    vecs.append(torch.nn.functional.normalize(capture.value, dim=-1).cpu().numpy())
                out.append(np.concatenate(vecs).astype(np.float32) if vecs else np.zeros((0, 0), np.float32))
    finally:
        capture.remove()
        model.train(was_training)
    return out


# ------------------------------------------------------------------------------------- continuations
def recorded_suggestions(saved: dict) -> dict:
    """(task, env seed, action prefix) of every state of the batch -> the expert's suggestions the episode
    got along that prefix (episodes that share a prefix share them), what ``replay_with_policy`` checks."""
    if "suggestions" not in saved:
        raise ValueError("this batch.pkl predates the recorded expert suggestions, so its continuations "
                         "cannot rebuild and check the policy's own state; rerun the cell with --overwrite")
    ro, out = saved["ro"], {}
    for e, (task, seed) in enumerate(zip(saved["tasks"], saved["seeds"])):
        rows = np.flatnonzero(ro.env_index == e)
        rows = rows[np.argsort(ro.batch.step_idx[rows], kind="stable")]
        actions, suggestions = [ro.actions[r] for r in rows], saved["suggestions"][e]
        for t in range(len(rows) + 1):
            out[(str(task), int(seed), tuple(actions[:t]))] = tuple(suggestions[:t])
    return out


_WORKER: dict = {}


def _worker_init(make_env, env_name, spec, policy, recorded):
    _WORKER.update(env=wrapped_env(make_env), env_name=env_name, spec=spec, policy=policy,
                   recorded=recorded)


def _worker_play(work):
    *job, stream = work         # (task, seed, replay, t) of a state, (..., exclude) of a stratum (strata.py)
    task, seed, replay, t = job[:4]
    exclude = job[4] if len(job) > 4 else None
    w = _WORKER
    recorded = None
    if w["recorded"] is not None:
        recorded = w["recorded"].get((str(task), int(seed), tuple(replay.actions)))
        if recorded is None:
            raise PolicyStateMismatch(f"{w['env_name']}: no recorded suggestions for step {t} of task "
                                      f"{task!r} (env seed {seed}): the continuation's prefix is not one of "
                                      "the batch's")
    ep = play_episode(w["env"], w["policy"], w["env_name"], w["spec"], np.random.default_rng(stream), task,
                      seed, w["spec"].expert_reset_options, replay=replay, recorded=recorded,
                      exclude_first=exclude)
    return ep["rewards"], ep["valid"], ep["won"], ep["checked"]


class ScriptedPlay:
    """``play(jobs, chunk_seed)`` for ``mc_truth.run_continuations``: one scripted continuation per job
    ``(task, seed, replay, t)``, job i of a chunk on the stream ``stream_seed(seed, "continuations",
    chunk_seed, i)``, spread over ``workers`` processes (1: in this process). With ``recorded``
    (``recorded_suggestions``) every replayed state's expert suggestion is checked; ``checked`` counts
    them."""

    def __init__(self, trainer, policy: ScriptedPolicy, seed: int, workers: int = 1, chunk: int = 64,
                 recorded: dict | None = None):
        self.seed, self.chunk, self.workers, self.checked = seed, chunk, max(1, int(workers)), 0
        init = (trainer.make_env, trainer.cfg.env, trainer.spec, policy, recorded)
        if self.workers > 1:
            self.pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context("fork"),
                                            initializer=_worker_init, initargs=init)
        else:
            self.pool = None
            _worker_init(*init)

    def __call__(self, jobs, chunk_seed):
        work = [(*job, stream_seed(self.seed, "continuations", chunk_seed, i)) for i, job in enumerate(jobs)]
        # one job at a time: ALFWorld's take from milliseconds to seconds
        if self.pool is None:
            results = [_worker_play(w) for w in work]
        else:
            results = list(self.pool.map(_worker_play, work))
        self.checked += sum(r[3] for r in results)
        return [r[:3] for r in results]

    def close(self):
        if self.pool is not None:
            self.pool.shutdown()
        elif "env" in _WORKER:
            _WORKER.pop("env").close()
