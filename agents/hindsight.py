"""The hindsight scoring pass of HCAPO and RELACE (spec-2 sections 4.2 and 5.2): after a rollout, one
teacher-forced forward per scored row under the outcome-augmented prompt, giving ``hind_logp_sum``.

    from agents.hindsight import HindsightSettings, score_hindsight
    sums, stats = score_hindsight(model, tok, ro, HindsightSettings(temperature=1.0))
    batch = ro.batch.with_fields(hind_logp_sum=sums)       # NaN on rows not scored (failures by default)

The augmented prompt x~_t is the exact token prompt the policy saw at step t with an outcome block put at
the end of the user message, just before the chat template's generation prompt, so the response tokens
y_t stay identical and only the conditioning changes. The sum is over the same response tokens as
``old_logp_sum``, at the rollout temperature, in eval mode without gradients. Rows are scored in micro-
batches; rows of one task run their common prompt prefix once (``agents.prefix`` through
``agents.ppo.response_logprobs(keys=...)``), on CPU or GPU alike. Only rows of successful trajectories are
scored unless ``score_failures`` (RELACE's failure block then states the failure). The pass's cost per
iteration: ``python -m benchmarks.speed.hindsight_cost``.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from agents.ppo import response_logprobs

SUCCESS_BLOCK = ("[Hindsight] This episode was eventually completed SUCCESSFULLY after {T} steps "
                 "(you are now at step {t}). Final observation: \"{final}\".\nGiven that this successful "
                 "outcome is reached, take the action that leads to it.")
FAILURE_BLOCK = ("[Hindsight] This episode eventually FAILED after {T} steps (you are now at step {t}). "
                 "Final observation: \"{final}\".")
SENTINEL = "\u2063BIPACE-HINDSIGHT\u2063"


@dataclass
class HindsightSettings:
    """Options of the scoring pass (spec-2 4.2 and 5.2; the block texts are [ASSUMPTION]s of the spec)."""
    temperature: float = 1.0
    """Divide the logits by this before the log-softmax: the rollout temperature, as ``old_logp_sum``."""
    score_failures: bool = False
    """Also score failed trajectories (under the failure block); HCAPO never reads them, RELACE may."""
    include_future_actions: bool = False
    """Add ``Then: a_{t+1}; ...; a_{T-1}`` (the later projected actions) to the block; never the current."""
    final_obs_chars: int = 300
    """The final observation (the anchor of the trajectory's last row) is clipped to this many characters."""
    max_prompt_tokens: int = 4096
    """A longer augmented prompt loses its oldest tokens (never the block); counted in ``truncated``."""
    micro_batch_rows: int = 16
    """Scored rows per forward."""
    share_prefix: bool = True
    """Rows of one task run their common prompt prefix once (``agents.prefix``)."""
    success_threshold: float = 0.0
    """A trajectory succeeded when its undiscounted reward exceeds this (the estimators' option)."""
    save_dir: str = ""
    """When set, each call appends its scored rows to ``<save_dir>/hindsight.jsonl``, one JSON line a row (the
    augmented prompt's and the response's token ids and the sum): an audit of what the pass conditioned on."""


def generation_tail(tok) -> list[int]:
    """Token ids the chat template puts after a user message's content when a generation prompt follows
    (e.g. ``<|im_end|>\\n<|im_start|>assistant\\n``): the block goes just before them."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": SENTINEL}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tok(text[text.rindex(SENTINEL) + len(SENTINEL):], add_special_tokens=False)["input_ids"]


def outcome_blocks(ro, settings: HindsightSettings, success: np.ndarray) -> dict[int, str]:
    """Row index -> the outcome block of every row to score (spec-2 4.2; 5.2 for failures)."""
    b = ro.batch
    view = b.view
    order = view.order
    blocks = {}
    starts = np.flatnonzero(np.r_[True, view.traj[order[1:]] != view.traj[order[:-1]]])
    for s, e in zip(starts, np.r_[starts[1:], len(order)]):
        rows = order[s:e]
        won = bool(success[rows[0]])
        if not won and not settings.score_failures:
            continue
        final = str(b.anchor[rows[-1]]) if b.anchor is not None else ""
        final = final[:settings.final_obs_chars]
        for t, r in enumerate(rows):
            text = (SUCCESS_BLOCK if won else FAILURE_BLOCK).format(T=len(rows), t=t + 1, final=final)
            if settings.include_future_actions and t + 1 < len(rows):
                text += "\nThen: " + "; ".join(str(ro.actions[k]) for k in rows[t + 1:])
            blocks[int(r)] = text
    return blocks


def augment_prompt(prompt: torch.Tensor, block_ids: list[int], tail: list[int], max_tokens: int):
    """(x~, truncated): the block inserted before the generation tail, oldest tokens dropped if too long."""
    n = len(tail)
    if len(prompt) < n or prompt[len(prompt) - n:].tolist() != tail:
        raise ValueError("a rollout prompt does not end with the chat template's generation prompt "
                         f"({tail}), so the hindsight block has no place: score prompts built with "
                         "apply_chat_template(..., add_generation_prompt=True)")
    body = prompt[:len(prompt) - n]
    extra = torch.tensor(block_ids + tail, dtype=prompt.dtype)
    room = max_tokens - len(extra)
    if room < 1:
        raise ValueError(f"max_prompt_tokens={max_tokens} leaves no room next to the {len(block_ids)}-token "
                         "hindsight block; raise it")
    truncated = len(body) > room
    return torch.cat([body[len(body) - room:] if truncated else body, extra]), truncated


def augmented_prompts(ro, tok, s: HindsightSettings,
                      success: np.ndarray) -> tuple[dict[int, torch.Tensor], int]:
    """(row index -> x~ for every row to score, prompts truncated): ``ro`` needs ``batch`` (its anchor of a
    trajectory's last row is the final observation), ``prompt_ids`` and, for ``include_future_actions``,
    ``actions``. The scoring pass here and the verl bridge's (``agents.verl_bridge.hindsight``) share it."""
    blocks = outcome_blocks(ro, s, success)
    tail = generation_tail(tok)
    prompts, truncated = {}, 0
    for r, text in blocks.items():
        ids = tok("\n\n" + text, add_special_tokens=False)["input_ids"]
        prompts[r], cut = augment_prompt(ro.prompt_ids[r], ids, tail, s.max_prompt_tokens)
        truncated += cut
    return prompts, truncated


def save_scored(save_dir: str, prompts: dict, responses, sums: np.ndarray) -> None:
    """Append row, x~ ids, response ids and hind_logp_sum of every row in ``prompts`` to
    ``save_dir/hindsight.jsonl`` (``HindsightSettings.save_dir``)."""
    path = Path(save_dir)
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "hindsight.jsonl", "a") as f:
        for r in sorted(prompts):
            f.write(json.dumps({"row": int(r), "prompt_ids": [int(t) for t in prompts[r]],
                                "response_ids": [int(t) for t in responses[r]],
                                "hind_logp_sum": float(sums[r])}) + "\n")


def score_hindsight(model, tok, ro, settings: HindsightSettings | None = None) -> tuple[np.ndarray, dict]:
    """(hind_logp_sum (N,) with NaN on unscored rows, stats) for the rows of rollout ``ro`` (an
    ``agents.rollout.Rollout``: ``batch``, ``prompt_ids``, ``response_ids``, ``prefix_keys``, ``actions``).

    stats: rows scored, prompt and response tokens run, prompts truncated, seconds."""
    from estimators.returns import trajectory_outcome
    s = settings or HindsightSettings()
    t0 = time.perf_counter()
    n = len(ro.response_ids)
    out = np.full(n, np.nan)
    success, _ = trajectory_outcome(ro.batch, s.success_threshold, None)
    prompts, truncated = augmented_prompts(ro, tok, s, success)
    rows = sorted(prompts)
    empty = [r for r in rows if len(ro.response_ids[r]) == 0]
    out[empty] = 0.0                                # no token to score: the sum over no token
    rows = [r for r in rows if len(ro.response_ids[r]) > 0]
    keys = [str(ro.prefix_keys[r]) if s.share_prefix and ro.prefix_keys else "" for r in rows]
    # rows of one task together (they share a prefix), then by length (less padding)
    rows = [r for _, _, r in sorted(zip(keys, [len(prompts[r]) for r in rows], rows))]
    was_training = model.training
    model.eval()
    tokens = 0
    try:
        with torch.no_grad():
            for m0 in range(0, len(rows), s.micro_batch_rows):
                part = rows[m0:m0 + s.micro_batch_rows]
                p_ids = [prompts[r] for r in part]
                r_ids = [ro.response_ids[r] for r in part]
                k = [ro.prefix_keys[r] for r in part] if s.share_prefix and ro.prefix_keys else None
                logp, _, mask = response_logprobs(model, p_ids, r_ids, tok.pad_token_id, s.temperature,
                                                  with_entropy=False, keys=k)
                out[part] = (logp.float() * mask).sum(-1).cpu().numpy()
                tokens += sum(len(p) + len(r) for p, r in zip(p_ids, r_ids))
    finally:
        model.train(was_training)
    if s.save_dir:
        save_scored(s.save_dir, prompts, ro.response_ids, out)
    stats = {"hindsight_rows": len(prompts), "hindsight_tokens": tokens, "hindsight_truncated": truncated,
             "hindsight_s": time.perf_counter() - t0}
    return out, stats


def settings_for(cfg) -> HindsightSettings:
    """The pass's settings in ``bipace-train``: the rollout's temperature, prompt limit, micro-batch and
    prefix sharing, and the estimator's success threshold."""
    threshold = float(cfg.estimator_options_dict().get("success_threshold", 0.0))
    return HindsightSettings(temperature=cfg.temperature, max_prompt_tokens=cfg.max_prompt_tokens,
                             micro_batch_rows=cfg.micro_batch_rows, share_prefix=cfg.share_prefix,
                             success_threshold=threshold)


HIND_KEY = "bipace_hind_logp_sum"
"""verl bridge: the (N,) float tensor of a DataProto that carries each step sample's ``hind_logp_sum``."""


def data_hindsight_sums(data) -> np.ndarray:
    """The per-sample hindsight sums of a verl DataProto (the bridge's advantage step puts them there, from
    ``agents.verl_bridge.hindsight.actor_hindsight_sums``), or the error that says how to produce them."""
    if HIND_KEY not in data.batch.keys():
        raise ValueError(f"the estimator needs StepBatch.hind_logp_sum, but the batch has no {HIND_KEY!r}: "
                         "the hindsight scoring pass fills it. Under verl, BipacePPOTrainer runs the pass "
                         "with the actor worker group before its advantage step (launch with `python -m "
                         "agents.verl_bridge.main`); outside it, put the sums (one float per step sample, "
                         "NaN where not scored) in the batch, computed as agents.hindsight.score_hindsight "
                         "does")
    return data.batch[HIND_KEY].detach().double().cpu().numpy()
