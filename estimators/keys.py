"""PACE action keys and the token broadcast of step advantages (spec §6.3, §2.8, §10.5, §10.11).

The agent calls `action_key` on each response; the trainer calls `broadcast_to_tokens` on the
estimator's output.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

INVALID_KEY = "<INVALID>"
"""Key of a response without an `<action>` ... `</action>` pair in that order (upper case, so no
lower-cased action body can collide with it)."""
EMPTY_KEY = "<EMPTY>"
"""Key of a response whose action body is empty after stripping."""
FIRST_TOKENS = 8

KEY_KINDS = ("action_tag", "first_token", "projected")


def action_tag_key(text: str) -> str:
    """Lower-case, body between the first `<action>` and the first `</action>`, whitespace
    stripped and collapsed. Missing or reversed tags -> INVALID_KEY; empty body -> EMPTY_KEY."""
    lowered = text.lower()
    start, end = lowered.find("<action>"), lowered.find("</action>")
    if start == -1 or end == -1 or end < start + len("<action>"):
        return INVALID_KEY
    body = " ".join(lowered[start + len("<action>"):end].split())
    return body if body else EMPTY_KEY


def first_token_key(response_ids: Sequence[int], n: int = FIRST_TOKENS) -> tuple:
    """tuple(response_ids[:min(n, L)]); an empty response gives ()."""
    return tuple(int(t) for t in list(response_ids)[:n])


def action_key(response_text: Optional[str] = None, response_ids: Optional[Sequence[int]] = None,
               kind: str = "action_tag", projected_action: Optional[str] = None):
    """The hashable PACE key of one response.

    kind: 'action_tag' (from response_text), 'first_token' (from response_ids) or 'projected' (the
    action actually sent to the env, lower-cased and whitespace-collapsed).
    """
    if kind == "action_tag":
        if not isinstance(response_text, str):
            raise ValueError("action_key(kind='action_tag') needs response_text as a str")
        return action_tag_key(response_text)
    if kind == "first_token":
        if response_ids is None:
            raise ValueError("action_key(kind='first_token') needs response_ids")
        return first_token_key(response_ids)
    if kind == "projected":
        if not isinstance(projected_action, str):
            raise ValueError("action_key(kind='projected') needs projected_action as a str")
        return " ".join(projected_action.lower().split()) or EMPTY_KEY
    raise ValueError(f"unknown action key kind {kind!r}; expected one of {KEY_KINDS}")


def broadcast_to_tokens(advantages: np.ndarray, response_mask: np.ndarray) -> np.ndarray:
    """adv_tok[i, :] = A_i * response_mask[i, :]: padded tokens get 0, an empty response row is 0."""
    adv = np.asarray(advantages, dtype=np.float64)
    mask = np.asarray(response_mask)
    if adv.ndim != 1 or mask.ndim != 2 or mask.shape[0] != adv.shape[0]:
        raise ValueError(f"broadcast_to_tokens needs advantages (N,) and response_mask (N, L); "
                         f"got {adv.shape} and {mask.shape}")
    return adv[:, None] * mask.astype(np.float64)
