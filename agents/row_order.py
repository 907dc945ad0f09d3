"""How the PPO update orders a rollout's rows into mini- and micro-batches, so that shared prompt
prefixes (a task's prompt, an episode's history) run once per micro-batch (``agents.prefix``).

Pure functions of the config and the rollout; ``agents.trainer.Trainer`` is the caller:

    order = shuffled_rows(ro, rows, rng, whole_episodes=by_episode(cfg, ro))
    keys, episodes = prefix_groups(cfg, ro, order[:16])
"""
from __future__ import annotations

import numpy as np


def shares_prefix(cfg, ro, grad: bool = True) -> bool:
    """Whether forwards over ``ro``'s rows run shared prompt prefixes once. The shared-prefix forward
    hands a KV cache between two calls, which gradient checkpointing drops, so not under autograd then."""
    return (cfg.share_prefix and not (grad and cfg.gradient_checkpointing)
            and len(ro.prefix_keys) == len(ro.prompt_ids))


def by_episode(cfg, ro) -> bool:
    """Mini-batches of whole episodes (their rows' env ids known), whose histories can run once."""
    return cfg.episode_minibatches() and ro.env_index is not None


def prefix_groups(cfg, ro, rows, grad: bool = True) -> tuple:
    """Per-row task keys and episode ids for the shared-prefix forward (None, None: plain forward)."""
    if not shares_prefix(cfg, ro, grad):
        return None, None
    # an episode's history runs once only where its rows share micro-batches (episode mini-batches)
    episodes = [int(ro.env_index[r]) for r in rows] if by_episode(cfg, ro) else None
    return [ro.prefix_keys[r] for r in rows], episodes


def shuffled_rows(ro, rows_all: np.ndarray, rng, whole_episodes: bool) -> np.ndarray:
    """The rows in the order mini-batches take them: shuffled, or shuffled by whole episodes with each
    episode's rows kept in step order."""
    if not whole_episodes:
        return rows_all[rng.permutation(len(rows_all))]
    episode = ro.env_index[rows_all]
    ids = np.unique(episode)
    rank = np.empty(ids.max() + 1 if len(ids) else 0, dtype=np.int64)
    rank[ids] = rng.permutation(len(ids))
    return rows_all[np.argsort(rank[episode], kind="stable")]


def prefix_codes(ro) -> np.ndarray:
    """One integer per row naming its prompt-prefix key (rows with equal keys share a prefix)."""
    return np.unique([str(k) for k in ro.prefix_keys], return_inverse=True)[1]


def micro_batch_order(ro, mb: np.ndarray, lengths: np.ndarray, key_code, whole_episodes: bool) -> np.ndarray:
    """A mini-batch's rows in the order micro-batches take them: micro-batches of one task share its prompt
    prefix, of one episode its history, and of similar length pad less (the loss's token-mean is over the
    whole mini-batch either way). ``key_code``: ``prefix_codes(ro)`` when prefixes are shared, else None."""
    if whole_episodes and key_code is not None:
        return mb[np.lexsort((mb, ro.env_index[mb], key_code[mb]))]
    by_length = [len(ro.prompt_ids[r]) + lengths[r] for r in mb]
    return mb[np.lexsort((by_length, key_code[mb] if key_code is not None else np.zeros(len(mb))))]
