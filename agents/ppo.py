"""PPO pieces as pure tensor functions: token log-probs of responses, the dual-clip policy loss,
low-variance KL and entropy (verl's ``core_algos`` semantics, spec §2.9).

    logp, ent, mask = response_logprobs(model, prompt_ids, response_ids, pad_id)
    terms = ppo_terms(logp, old_logp, adv_tok, mask, ref_logp=ref, clip=0.2, dual_clip=3.0)
"""
from __future__ import annotations

import torch


def pad_batch(prompt_ids, response_ids, pad_id: int, device):
    """Left-pad prompts to P and right-pad responses to R (verl's layout), so the response always
    starts at column P. Returns input_ids, attention_mask, position_ids, response mask (B, R)."""
    B = len(prompt_ids)
    P = max(len(p) for p in prompt_ids)
    R = max(1, max(len(r) for r in response_ids))
    ids = torch.full((B, P + R), pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + R), dtype=torch.long)
    for b, (p, r) in enumerate(zip(prompt_ids, response_ids)):
        ids[b, P - len(p):P] = p
        ids[b, P:P + len(r)] = r
        attn[b, P - len(p):P + len(r)] = 1
    pos = (attn.cumsum(1) - 1).clamp(min=0)   # what generate() uses for left-padded prompts
    return ids.to(device), attn.to(device), pos.to(device), attn[:, P:].to(device).float()


def response_logits(model, prompt_ids, response_ids, pad_id: int, keys=None):
    """Teacher-forced logits at each response position: (B, R, V) logits, the (B, R) response ids
    they predict, and the (B, R) response mask. With ``keys`` (one per row), rows with equal keys run
    their common prompt prefix once (``agents.prefix``; same numbers, fewer tokens)."""
    if keys is not None:
        from agents.prefix import shared_response_logits
        return shared_response_logits(model, prompt_ids, response_ids, keys, pad_id)
    device = next(model.parameters()).device
    ids, attn, pos, rmask = pad_batch(prompt_ids, response_ids, pad_id, device)
    R = rmask.shape[1]
    # Only the R positions that predict response tokens need the LM head (the vocab can be 150k).
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=R + 1,
                   use_cache=False).logits[:, :-1]
    return logits, ids[:, -R:], rmask


def response_logprobs(model, prompt_ids, response_ids, pad_id: int, temperature: float = 1.0,
                      with_entropy: bool = True, keys=None):
    """Per-token log-prob (and entropy) of each response under ``model``. Shapes (B, R)."""
    logits, targets, rmask = response_logits(model, prompt_ids, response_ids, pad_id, keys)
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    lp_all = torch.log_softmax(logits, -1)
    logp = lp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    ent = -(lp_all.exp() * lp_all).sum(-1) if with_entropy else None
    return logp, ent, rmask


def low_var_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || pi_ref), clamped to [-10, 10] as in verl."""
    kl = ref_logp - logp
    return (torch.exp(kl) - kl - 1).clamp(-10, 10)


def ppo_terms(logp, old_logp, adv, mask, ref_logp=None, clip_low: float = 0.2, clip_high: float = 0.2,
              dual_clip: float = 3.0):
    """Token-level PPO terms. Returns dict of (B, R) tensors: pg (dual-clip loss), kl (or None),
    clipped (bool, for the clip fraction), ratio."""
    ratio = torch.exp((logp - old_logp).clamp(-20, 20))
    l1, l2 = -adv * ratio, -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    clipped_pg = torch.maximum(l1, l2)
    # dual clip bounds the loss for negative advantages when the ratio explodes
    pg = torch.where(adv < 0, torch.minimum(clipped_pg, -adv * dual_clip), clipped_pg)
    kl = low_var_kl(logp, ref_logp) if ref_logp is not None else None
    return {"pg": pg, "kl": kl, "clipped": (l2 > l1) & mask.bool(), "ratio": ratio}
