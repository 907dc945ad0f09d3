"""Batched multi-turn rollouts: B tasks x G rollouts through a gymnasium vector env, one ``generate``
per step over all active envs, recording per-step rows (``estimators.StepBatch``) plus what PPO needs.

    collector = RolloutCollector(model, tok, make_env, n_envs=B * G, prompter=..., settings=...,
                                 reward_map=...)
    ro = collector.collect(task_ids, seeds, group_ids)     # one entry per env; a group shares task+seed
    ro.batch            # StepBatch (anchor = env info['anchor'] of the state acted on, embedding, key)
    ro.prompt_ids[i], ro.response_ids[i], ro.old_logprobs[i]   # per row, unpadded

The BiGPO embedding is the hidden state of one decoder layer at the last prompt token. Prompts are
left-padded, so that is position -1 of the *prefill* forward that ``generate`` runs anyway: a forward
hook copies that one vector per env and disarms itself, so no extra forward pass is made.
Old log-probs come from the same ``generate`` call (raw logits at the rollout temperature), gathered for
the sampled token at each decoding step (``SampledLogprobs``), so no step's full-vocabulary logits are kept.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial

import gymnasium as gym
import numpy as np
import torch
from transformers import StoppingCriteriaList

from agents.capture import HiddenCapture, SampledLogprobs
from agents.parsing import parse_action
from agents.prefix import (cache_kwarg, common_prefix_len, gather_columns, gatherable, hashable_key, left_pad,
                           output_cache, prefill, split_prompts)
from agents.replay import ReplayPrefix


@dataclass
class RolloutSettings:
    """Decoding and recording options of a rollout."""
    max_steps: int = 50               # env steps per episode (the env truncates at its own max_steps too)
    max_new_tokens: int = 512         # response budget per step
    max_prompt_tokens: int = 4096     # longer prompts: error or left-truncate (see truncation)
    truncation: str = "error"         # "error" (verl default) or "left"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                    # 0 = off (verl's -1)
    do_sample: bool = True
    capture_hidden: bool = True       # record the BiGPO embedding from the prefill pass
    hidden_layer: int | None = None   # HF hidden_states index; None = BiPACE's -12-of-28 depth, scaled
    logprobs: bool = True             # keep per-token log-probs of the sampled tokens (needed for PPO)
    require_think: bool = True        # parser rule: answers without <think></think> are invalid
    key_kind: str = "action_tag"      # PACE action key: action_tag | first_token | projected
    share_prefix: bool = True         # run each task's common prompt prefix once per step (agents.prefix)
    carry_cache: bool = True          # keep each env's KV cache between steps: a step runs only what its
    #                                   prompt adds to the previous one (with share_prefix)
    compact_cache: bool = True        # with carry_cache: drop the columns a step does not reuse (the old
    #                                   instruction tail, the answer, padding) instead of masking them


def _indexed_env(make_env, index):
    return _TaskEnv(make_env(), index)


class _TaskEnv(ReplayPrefix):
    """Lets one vector ``reset`` give each sub-env its own task and replay: ``options={'task_ids': [...],
    'replays': [...]}`` (``agents.replay``)."""

    def __init__(self, env, index):
        super().__init__(env)
        self.index = index

    def reset(self, *, seed=None, options=None):
        if options and ("task_ids" in options or "replays" in options):
            task = options.get("task_ids", [None] * (self.index + 1))[self.index]
            replay = options.get("replays", [None] * (self.index + 1))[self.index]
            options = {k: v for k, v in options.items() if k not in ("task_ids", "replays")}
            if task is not None:
                options["task_id"] = task
            if replay is not None:
                options["replay"] = replay
        return super().reset(seed=seed, options=options)


def _info_at(infos: dict, i: int) -> dict:
    """Env i's info from a vector env's merged infos (nested dicts, e.g. WebShop's goal, are merged
    key by key, so they are unpacked the same way)."""
    out = {}
    for k, v in infos.items():
        if isinstance(k, str) and k.startswith("_"):      # a mask; an env's nested info may have keys
            continue                                      # that are not strings
        mask = infos.get(f"_{k}")                         # gymnasium's mask name for any key
        if mask is None or mask[i]:
            out[k] = _info_at(v, i) if isinstance(v, dict) else v[i]
    return out


@dataclass
class CarriedCache:
    """The KV cache one step's ``generate`` leaves, kept for the next step of the same envs: a compact
    prompt repeats the previous step's prompt up to its instruction tail, so those tokens need not run
    again. Cache columns that held the old tail, padding or the answer are masked out (a gapped mask, as
    in ``agents.prefix``), so each row sees exactly its new prompt. ``compact`` gathers each row's reused
    columns to the front instead (``agents.prefix.gather_columns``): attention then reads only live columns,
    where the masked ones grew the cache by a prompt tail and an answer every step (2-3x the prompt)."""
    cache: object                   # batched over ``envs``
    envs: list                      # env index of each cache row
    prompts: list                   # each row's prompt tokens
    prompt_cols: torch.Tensor       # (rows, W) bool: the columns that hold each row's prompt, in order

    def width(self) -> int:
        return self.prompt_cols.shape[1]

    def continue_with(self, envs: list, prompts: list, device, compact: bool = False):
        """Cache, (N, W) mask of the cached columns each new prompt reuses, and each prompt's new tokens.
        With ``compact`` the cache keeps only the reused columns, each row's left-padded to the longest
        (W = the most any row reuses); ``agents.prefix.gatherable`` says which caches can be compacted."""
        where = {e: k for k, e in enumerate(self.envs)}
        if any(e not in where for e in envs):
            raise ValueError(f"envs {sorted(set(envs) - set(where))} have no carried cache")
        rows = [where[e] for e in envs]
        cols = self.prompt_cols[rows]
        reused, suffixes = [], []
        for k, (r, p) in enumerate(zip(rows, prompts)):
            shared = min(common_prefix_len([p, self.prompts[r]]), len(p) - 1)   # one token left to feed
            reused.append(torch.nonzero(cols[k])[:shared, 0])
            suffixes.append(p[shared:])
        self.cache.batch_select_indices(torch.tensor(rows, device=device))
        if compact:                                 # the caller checked gatherable(cache)
            index, keep = left_pad(reused, 0)       # padding columns point at column 0, masked out
            gather_columns(self.cache, index)
            return self.cache, keep, suffixes
        keep = torch.zeros(cols.shape, dtype=torch.long)
        for k, columns in enumerate(reused):
            keep[k, columns] = 1
        return self.cache, keep, suffixes


@dataclass
class Rollout:
    """Everything one collection produced, one row per agent step in time-major order: step 0 of
    every env, then step 1 of the envs still running, and so on; within a step, by env index
    (``env_index`` and ``batch.step_idx`` give each row's env and step)."""
    batch: object                               # estimators.StepBatch
    prompt_ids: list = field(default_factory=list)
    response_ids: list = field(default_factory=list)
    old_logprobs: list = field(default_factory=list)
    prefix_keys: list = field(default_factory=list)   # per row: rows with equal keys share a prompt prefix
    responses: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    env_index: np.ndarray | None = None         # (N,) which env produced the row
    success: np.ndarray | None = None           # (n_envs,) episode won
    score: np.ndarray | None = None             # (n_envs,) the env's final info['score'] (WebShop), else won
    admissible: np.ndarray | None = None        # (N,) per row: the env took the action (info['action_valid'])
    episode_return: np.ndarray | None = None    # (n_envs,) mapped reward sum
    episode_length: np.ndarray | None = None    # (n_envs,)
    renamed: np.ndarray | None = None           # (n_envs,) played in a renamed world (reset info 'renamed')
    gen_seconds: float = 0.0
    env_seconds: float = 0.0


class RolloutCollector:
    """Owns the vector env and steps it with the policy. ``make_env()`` builds one env instance."""

    def __init__(self, model, tokenizer, make_env, n_envs: int, prompter, settings: RolloutSettings,
                 reward_map, vector_mode: str = "sync", fallback_chars: int = 30,
                 vector_kwargs: dict | None = None):
        self.model, self.tok, self.prompter, self.s = model, tokenizer, prompter, settings
        self.reward_map, self.fallback_chars, self.n = reward_map, fallback_chars, n_envs
        fns = [partial(_indexed_env, make_env, i) for i in range(n_envs)]
        modes = {"sync": gym.vector.SyncVectorEnv, "async": gym.vector.AsyncVectorEnv, "ray": None}
        if vector_mode not in modes:
            raise ValueError(f"vector_mode must be one of {sorted(modes)}, got {vector_mode!r}")
        if vector_mode == "ray":    # envs in Ray actors; vector_kwargs go to RayVectorEnv
            from bipace_envs.vector import RayVectorEnv
            modes["ray"] = partial(RayVectorEnv, **(vector_kwargs or {}))
        elif vector_kwargs:
            raise ValueError(f"vector_kwargs are RayVectorEnv options; vector_mode {vector_mode!r} "
                             "takes none")
        self.envs = modes[vector_mode](fns, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
        self.capture = HiddenCapture(model, settings.hidden_layer) if settings.capture_hidden else None
        temp = settings.temperature if settings.do_sample else 1.0
        self.sampled = SampledLogprobs(model, temp) if settings.logprobs else None
        eos = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.pad_token_id]
        self.stop_ids = sorted({int(t) for t in eos if t is not None and t >= 0})

    def close(self) -> None:
        for hook in (self.capture, self.sampled):
            if hook is not None:
                hook.remove()
        self.envs.close()

    def _prompt_ids(self, texts: list[str]) -> list[torch.Tensor]:
        """Each prompt's token ids, cut on the left to ``max_prompt_tokens`` where truncation allows it."""
        ids = [torch.tensor(x) for x in self.tok(texts, add_special_tokens=False)["input_ids"]]
        longest = max(len(x) for x in ids)
        if longest > self.s.max_prompt_tokens:
            if self.s.truncation != "left":
                raise ValueError(f"a prompt has {longest} tokens > "
                                 f"max_prompt_tokens={self.s.max_prompt_tokens}; "
                                 "raise --max-prompt-tokens, shorten --history-length, or use --truncation "
                                 "left")
            ids = [x[-self.s.max_prompt_tokens:] for x in ids]
        return ids

    @torch.no_grad()
    def generate(self, texts: list[str], keys: list | None = None, carried: CarriedCache | None = None,
                 envs: list | None = None):
        """One batched generate. Rows with equal ``keys`` (same task) share their common prompt prefix's
        forward when ``share_prefix`` is on; with ``carried`` (the previous step's cache of ``envs``) each
        row runs only the tokens its prompt adds. Returns (prompt ids, response ids, logprobs, texts, emb,
        the cache to carry to the next step or None)."""
        dev = next(self.model.parameters()).device
        prompts, extra = self._prompt_ids(texts), {}
        pad = self.tok.pad_token_id
        compact = carried is not None and self.s.compact_cache and gatherable(carried.cache)
        if (carried is not None and not compact
                and carried.width() > 2 * max(map(len, prompts)) + self.s.max_new_tokens):
            carried = None      # mostly stale columns (prompts that share little): start afresh, bound memory
        if carried is not None:
            cache, cached_mask, suffixes = carried.continue_with(envs, prompts, dev, compact)
            ids, mask = left_pad(suffixes, pad)
            extra = {cache_kwarg(self.model): cache}
            ids = torch.cat([torch.full(cached_mask.shape, pad, dtype=torch.long), ids], 1)
            mask = torch.cat([cached_mask, mask], 1)
        elif self.s.share_prefix and keys is not None:
            # each key's common prefix runs once here; generate() continues from its cache
            split = split_prompts(prompts, keys, pad)
            extra = {cache_kwarg(self.model): prefill(self.model, split)}
            ids, mask = split.full()
        else:
            ids, mask = left_pad(prompts, pad)
        ids, mask = ids.to(dev), mask.to(dev)
        if self.capture is not None:
            self.capture.arm()       # after the prefix pass: the hook must see the last prompt token's pass
        if self.sampled is not None:
            self.sampled.arm()
        out = self.model.generate(
            **extra, input_ids=ids, attention_mask=mask, max_new_tokens=self.s.max_new_tokens,
            do_sample=self.s.do_sample, temperature=self.s.temperature if self.s.do_sample else None,
            top_p=self.s.top_p if self.s.do_sample else None,
            top_k=self.s.top_k if self.s.do_sample else None,
            eos_token_id=self.stop_ids, pad_token_id=self.tok.pad_token_id, use_cache=True,
            return_dict_in_generate=True,
            stopping_criteria=StoppingCriteriaList([self.sampled] if self.sampled is not None else []))
        P = ids.shape[1]
        carry = None
        if self.s.share_prefix and self.s.carry_cache and envs is not None:
            cache = output_cache(out)
            cols = torch.zeros((len(texts), cache.get_seq_length()), dtype=torch.bool)
            cols[:, :P] = mask.bool().cpu()           # the answer's columns are not part of the next prompt
            carry = CarriedCache(cache, list(envs), prompts, cols)
        resp = out.sequences[:, P:]
        stop = torch.isin(resp, torch.tensor(self.stop_ids, device=resp.device))
        keep = (torch.cumsum(stop.int(), 1) - stop.int()) == 0          # up to and including the first stop
        lengths = keep.sum(1).tolist()
        logps = self.sampled.take(resp.shape[1]) if self.sampled is not None else None
        emb = None
        if self.capture is not None:
            t0 = time.perf_counter()
            emb = torch.nn.functional.normalize(self.capture.value, dim=-1).cpu().numpy().astype(np.float32)
            self.capture.seconds += time.perf_counter() - t0
        p_ids = prompts
        r_ids = [resp[r, :lengths[r]].cpu() for r in range(len(texts))]
        r_lp = ([logps[r, :lengths[r]].cpu() for r in range(len(texts))] if logps is not None
                else [None] * len(texts))
        r_txt = self.tok.batch_decode(r_ids, skip_special_tokens=True)
        return p_ids, r_ids, r_lp, r_txt, emb, carry

    def collect(self, task_ids, seeds, group_ids, traj_ids=None, replays=None) -> Rollout:
        """Run every env to the end of its episode. ``task_ids``/``seeds``/``group_ids``: one per env.
        ``replays`` (one ``agents.replay.Replay`` or None per env): start each env from the state its
        replayed prefix reaches, the prompts showing that prefix as history; rows record only the steps
        played here."""
        from estimators import StepBatch, action_key
        n = self.n
        if not (len(task_ids) == len(seeds) == len(group_ids) == n):
            raise ValueError(f"need one task id, seed and group id per env ({n}); got "
                             f"{len(task_ids)}, {len(seeds)}, {len(group_ids)}")
        traj_ids = list(range(n)) if traj_ids is None else list(traj_ids)
        prefix_keys = [hashable_key(t) for t in task_ids]     # a task's prompts share goal and recipe lines
        t0 = time.perf_counter()
        options = {"task_ids": list(task_ids)}
        if replays is not None:
            if len(replays) != n:
                raise ValueError(f"need one replay (or None) per env ({n}); got {len(replays)}")
            options["replays"] = list(replays)
        obs, infos = self.envs.reset(seed=[int(s) for s in seeds], options=options)
        env_s = time.perf_counter() - t0
        cur_obs, cur_info = list(obs), [_info_at(infos, i) for i in range(n)]
        renamed = np.array([bool(info.get("renamed", False)) for info in cur_info])
        for i in range(n):
            first_obs, first_info = cur_info[i].pop("replay_first", (cur_obs[i], cur_info[i]))
            self.prompter.reset(i, first_obs, first_info)
            for past_obs, past_action in cur_info[i].pop("replay_history", ()):
                self.prompter.record(i, past_obs, past_action)
        active = np.ones(n, bool)
        success, ret, length = np.zeros(n, bool), np.zeros(n), np.zeros(n, int)
        score = np.zeros(n)
        rows = {k: [] for k in ("env", "step", "reward", "valid", "admissible", "anchor", "key", "emb")}
        ro = Rollout(batch=None)
        gen_s, carried = 0.0, None
        for t in range(self.s.max_steps):
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            texts = [self.tok.apply_chat_template(self.prompter.messages(i, cur_obs[i], cur_info[i]),
                                                  tokenize=False, add_generation_prompt=True) for i in idx]
            t1 = time.perf_counter()
            p_ids, r_ids, r_lp, r_txt, emb, carried = self.generate(texts, [prefix_keys[i] for i in idx],
                                                                    carried, idx.tolist())
            gen_s += time.perf_counter() - t1
            actions = [""] * n
            valid = {}
            for k, i in enumerate(idx):
                actions[i], valid[i] = parse_action(r_txt[k], self.s.require_think, self.fallback_chars)
            t2 = time.perf_counter()
            obs, rew, term, trunc, infos = self.envs.step(actions)
            env_s += time.perf_counter() - t2
            for k, i in enumerate(idx):
                info = _info_at(infos, i)
                r = float(self.reward_map(float(rew[i]), bool(term[i]), info))
                rows["env"].append(i)
                rows["step"].append(t)
                rows["reward"].append(r)
                rows["valid"].append(valid[i])
                rows["admissible"].append(bool(info.get("action_valid", True)))
                rows["anchor"].append(cur_info[i].get("anchor", cur_obs[i]))
                rows["key"].append(action_key(response_text=r_txt[k], response_ids=r_ids[k].tolist(),
                                              kind=self.s.key_kind, projected_action=actions[i]))
                rows["emb"].append(emb[k] if emb is not None else None)
                ro.prompt_ids.append(p_ids[k])
                ro.response_ids.append(r_ids[k])
                ro.old_logprobs.append(r_lp[k])
                ro.prefix_keys.append(prefix_keys[i])
                ro.responses.append(r_txt[k])
                ro.actions.append(actions[i])
                self.prompter.record(i, cur_obs[i], actions[i])
                ret[i] += r
                length[i] += 1
                if term[i] or trunc[i]:
                    active[i] = False
                    success[i] = bool(info.get("won", False))
                    score[i] = float(info.get("score", success[i]))
                cur_obs[i], cur_info[i] = obs[i], info
        env = np.asarray(rows["env"], dtype=np.int64)
        anchors = np.empty(len(env), dtype=object)
        anchors[:] = rows["anchor"]
        keys = np.empty(len(env), dtype=object)
        keys[:] = rows["key"]
        embs = np.stack(rows["emb"]) if self.capture is not None and len(env) else None
        ro.batch = StepBatch(group_id=np.asarray(group_ids)[env], traj_id=np.asarray(traj_ids)[env],
                             step_idx=np.asarray(rows["step"], dtype=np.int64),
                             reward=np.asarray(rows["reward"], dtype=np.float64),
                             action_valid=np.asarray(rows["valid"], dtype=bool),
                             anchor=anchors, action_key=keys, embedding=embs)
        ro.env_index, ro.success, ro.episode_return, ro.episode_length = env, success, ret, length
        ro.renamed, ro.score = renamed, score
        ro.admissible = np.asarray(rows["admissible"], dtype=bool)
        ro.gen_seconds, ro.env_seconds = gen_s, env_s
        return ro
