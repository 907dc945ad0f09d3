"""PPO pieces as pure tensor functions: token log-probs of responses, the dual-clip policy loss,
low-variance KL and entropy (verl's ``core_algos`` semantics, spec §2.9).

    logp, ent, mask = response_logprobs(model, prompt_ids, response_ids, pad_id)   # chunked LM head
    terms = ppo_terms(logp, old_logp, adv_tok, mask, ref_logp=ref, clip_low=0.2, clip_high=0.28,
                      ratio_level="sequence")                   # GSPO ratio, DAPO clip-higher
    pg = agg_loss(terms["pg"], mask, "seq_mean_token_mean")   # or token_mean (default), seq_mean_token_sum
"""
from __future__ import annotations

import numpy as np
import torch

from agents.prefix import pad_batch, response_inputs  # noqa: F401  (pad_batch: public here too)


def response_logits(model, prompt_ids, response_ids, pad_id: int, keys=None, episodes=None):
    """Teacher-forced logits at each response position: (B, R, V) logits, the (B, R) response ids
    they predict, and the (B, R) response mask. With ``keys`` (one per row), rows with equal keys run
    their common prompt prefix once, and with ``episodes`` too each episode's shared history
    (``agents.prefix``; same numbers, fewer tokens)."""
    inp = response_inputs(model, prompt_ids, response_ids, pad_id, keys, episodes)
    R = inp.mask.shape[1]
    # Only the R positions that predict response tokens need the LM head (the vocab can be 150k).
    logits = model(**inp.forward, logits_to_keep=R + 1).logits[:, :-1]
    return logits, inp.targets, inp.mask


def plain_lm_head(model):
    """The output projection of a causal LM whose logits are exactly ``lm_head(decoder(...))`` (Qwen2,
    Llama/SmolLM2, Mistral, ...), else None: models that scale or soft-cap their logits after the head
    (Gemma 2/3, Cohere) keep the whole-logits path."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = base.config
    if any(getattr(cfg, name, None) is not None for name in ("final_logit_softcapping", "logit_scale")):
        return None
    head = base.get_output_embeddings()
    return head if isinstance(head, torch.nn.Module) else None


def logit_terms(logits, targets, temperature: float = 1.0, with_entropy: bool = True):
    """Log-prob of ``targets`` and entropy (None without ``with_entropy``) under ``logits`` (..., V) at
    ``temperature``, in float32."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    lp_all = torch.log_softmax(logits, -1)
    logp = lp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return logp, (-(lp_all.exp() * lp_all).sum(-1) if with_entropy else None)


def _token_terms(head, hidden, targets, temperature: float, with_entropy: bool):
    """``logit_terms`` of the head's logits of ``hidden`` (T, H); entropy 0 without ``with_entropy`` (a
    checkpointed function returns tensors only)."""
    logp, ent = logit_terms(head(hidden), targets, temperature, with_entropy)
    return logp, (ent if ent is not None else torch.zeros_like(logp))


def chunked_token_logprobs(head, hidden, targets, mask, temperature: float = 1.0, with_entropy: bool = True,
                           chunk_tokens: int = 256):
    """Per-token log-probs and entropy (B, R) from the decoder's (B, R, H) hidden states, never holding more
    than ``chunk_tokens`` rows of full-vocabulary logits: only the response tokens (``mask``) go through the
    head, ``chunk_tokens`` at a time, and under autograd each chunk's logits are recomputed in the backward
    pass (checkpointed) instead of being kept. Masked positions get 0."""
    from torch.utils.checkpoint import checkpoint
    where = mask.bool()
    h, y = hidden[where], targets[where]
    logp = torch.zeros(mask.shape, dtype=torch.float32, device=hidden.device)
    ent = torch.zeros_like(logp) if with_entropy else None
    parts_lp, parts_ent = [], []
    for s in range(0, h.shape[0], chunk_tokens):
        args = (head, h[s:s + chunk_tokens], y[s:s + chunk_tokens], temperature, with_entropy)
        lp, en = (checkpoint(_token_terms, *args, use_reentrant=False) if torch.is_grad_enabled()
                  else _token_terms(*args))
        parts_lp.append(lp)
        parts_ent.append(en)
    if parts_lp:
        logp = logp.masked_scatter(where, torch.cat(parts_lp))
        if with_entropy:
            ent = ent.masked_scatter(where, torch.cat(parts_ent))
    return logp, ent


def response_logprobs(model, prompt_ids, response_ids, pad_id: int, temperature: float = 1.0,
                      with_entropy: bool = True, keys=None, episodes=None, chunk_tokens: int = 256):
    """Per-token log-prob (and entropy) of each response under ``model``: (B, R) each, and the (B, R)
    response mask. ``chunk_tokens`` > 0 runs the LM head on the decoder's hidden states a chunk of
    response tokens at a time (``chunked_token_logprobs``: float32 full-vocabulary logits for at most that
    many tokens at once; 0 where the mask is 0); 0 takes the whole micro-batch's logits at once."""
    head = plain_lm_head(model) if chunk_tokens > 0 else None
    if head is None:
        logits, targets, rmask = response_logits(model, prompt_ids, response_ids, pad_id, keys, episodes)
        return (*logit_terms(logits, targets, temperature, with_entropy), rmask)
    inp = response_inputs(model, prompt_ids, response_ids, pad_id, keys, episodes)
    R = inp.mask.shape[1]
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.get_decoder()(**inp.forward).last_hidden_state[:, -(R + 1):-1]
    logp, ent = chunked_token_logprobs(head, hidden, inp.targets, inp.mask, temperature, with_entropy,
                                       chunk_tokens)
    return logp, ent, inp.mask


def low_var_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || pi_ref), clamped to [-10, 10] as in verl."""
    kl = ref_logp - logp
    return (torch.exp(kl) - kl - 1).clamp(-10, 10)


RATIO_LEVELS = ("token", "sequence")
LOSS_AGGS = ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean")


def check_loss_options(ratio_level: str, loss_agg: str, clip_low: float, clip_high: float) -> None:
    """Raise ValueError for a loss option the functions below do not know."""
    if ratio_level not in RATIO_LEVELS:
        raise ValueError(f"ratio_level must be one of {RATIO_LEVELS}; got {ratio_level!r}")
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"loss_agg must be one of {LOSS_AGGS}; got {loss_agg!r}")
    if not (0 <= clip_low < 1 and clip_high >= 0):
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0; got {clip_low}, {clip_high}")


def log_ratio(logp, old_logp, mask, ratio_level: str = "token"):
    """(B, R) log importance ratios. 'token': log pi - log pi_old per token (PPO). 'sequence': GSPO's
    length-normalised sequence ratio, log s_i = mean over the response's tokens of (log pi - log pi_old),
    the same value at every token of the row. It is written in GSPO-token form (verl's):
    log s_i + log pi_t - sg(log pi_t), whose gradient at token t is grad log pi_t; averaged over the row's
    tokens that is exactly the gradient of s_i, so the two forms train alike."""
    diff = logp - old_logp
    if ratio_level == "token":
        return diff
    if ratio_level != "sequence":
        raise ValueError(f"ratio_level must be one of {RATIO_LEVELS}; got {ratio_level!r}")
    seq = (diff * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return logp - logp.detach() + seq.detach().unsqueeze(-1)


def agg_loss(values, mask, loss_agg: str = "token_mean", total_tokens=None, total_rows=None):
    """Scalar loss from (B, R) per-token values (verl's ``agg_loss`` modes):
    token_mean = sum(v * mask) / tokens; seq_mean_token_sum = mean over rows of the row's token sum;
    seq_mean_token_mean = mean over rows of the row's token mean. ``total_tokens``/``total_rows`` are the
    mini-batch's counts when ``values`` is one micro-batch of it, so the micro-batch losses add up to the
    mini-batch loss (default: this batch's own counts)."""
    masked = values * mask
    if loss_agg == "token_mean":
        return masked.sum() / (mask.sum() if total_tokens is None else total_tokens)
    rows = values.shape[0] if total_rows is None else total_rows
    if loss_agg == "seq_mean_token_sum":
        return masked.sum() / rows
    if loss_agg == "seq_mean_token_mean":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).sum() / rows
    raise ValueError(f"loss_agg must be one of {LOSS_AGGS}; got {loss_agg!r}")


def row_logp_sums(response_ids, old_logprobs) -> dict:
    """Per-row inputs of estimators that read the rollout policy's log-probs (GACA; HCAPO/RELACE later):
    ``resp_len`` (tokens) and ``old_logp_sum`` (sum of the old log-probs), for ``StepBatch.with_fields``."""
    lengths = np.array([len(r) for r in response_ids], dtype=np.int64)
    sums = np.array([float(lp[:n].sum()) if n else 0.0 for lp, n in zip(old_logprobs, lengths)])
    return {"resp_len": lengths, "old_logp_sum": sums}


def ppo_terms(logp, old_logp, adv, mask, ref_logp=None, clip_low: float = 0.2, clip_high: float = 0.2,
              dual_clip: float = 3.0, ratio_level: str = "token"):
    """Token-level PPO terms. Returns dict of (B, R) tensors: pg (dual-clip loss), kl (or None),
    clipped (bool, for the clip fraction), ratio. clip_low < clip_high is DAPO's clip-higher;
    ratio_level='sequence' is GSPO's sequence ratio (see `log_ratio`)."""
    ratio = torch.exp(log_ratio(logp, old_logp, mask, ratio_level).clamp(-20, 20))
    l1, l2 = -adv * ratio, -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    clipped_pg = torch.maximum(l1, l2)
    # dual clip bounds the loss for negative advantages when the ratio explodes
    pg = torch.where(adv < 0, torch.minimum(clipped_pg, -adv * dual_clip), clipped_pg)
    kl = low_var_kl(logp, ref_logp) if ref_logp is not None else None
    return {"pg": pg, "kl": kl, "clipped": (l2 > l1) & mask.bool(), "ratio": ratio}
