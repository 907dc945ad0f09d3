"""DAPO's dynamic sampling: drop rollout groups whose episodes all ended alike, refill from more tasks.

A group whose G outcomes are equal carries no outcome signal (GRPO gives it 0), yet it fills the batch.
DAPO keeps sampling batches of new tasks until enough informative groups are kept, within a bound on
the number of batches, and then trims to the batch size.

    ro, stats = dynamic_sample(first, lambda r: trainer.rollout(it, r)[0], want_groups=16, max_rounds=3)
"""
from __future__ import annotations

import dataclasses

import numpy as np


# the Rollout fields with one entry per step row and per env (a list left empty by its producer, such as
# a scripted batch's old_logprobs, stays empty)
PER_ROW = ("prompt_ids", "response_ids", "old_logprobs", "prefix_keys", "responses", "actions")
PER_ROW_ARRAYS = ("admissible",)
PER_ENV = ("success", "score", "episode_return", "episode_length", "renamed")


def informative_groups(env_group: np.ndarray, outcome: np.ndarray, tol: float = 1e-9) -> np.ndarray:
    """Group ids (in order of first appearance) whose per-env outcomes are not all equal (max - min > tol)."""
    env_group, outcome = np.asarray(env_group), np.asarray(outcome, dtype=np.float64)
    if env_group.shape != outcome.shape or env_group.ndim != 1:
        raise ValueError(f"need one group id and one outcome per env; got shapes {env_group.shape}, "
                         f"{outcome.shape}")
    ids, first, codes = np.unique(env_group, return_index=True, return_inverse=True)
    codes = codes.reshape(-1)
    hi = np.full(len(ids), -np.inf)
    lo = np.full(len(ids), np.inf)
    np.maximum.at(hi, codes, outcome)
    np.minimum.at(lo, codes, outcome)
    keep = hi - lo > tol
    return ids[keep][np.argsort(first[keep], kind="stable")]


def env_groups(ro) -> np.ndarray:
    """(n_envs,) group id of each env of a rollout (every env plays at least one step)."""
    out = np.empty(len(ro.success), dtype=ro.batch.group_id.dtype)
    out[ro.env_index] = ro.batch.group_id
    return out


def _batch_fields(batch) -> list[str]:
    return [f.name for f in dataclasses.fields(batch) if f.init]


def select_envs(ro, keep_env: np.ndarray):
    """The rollout restricted to the envs where ``keep_env`` is True (rows and per-env arrays)."""
    keep_env = np.asarray(keep_env, dtype=bool)
    rows = np.flatnonzero(keep_env[ro.env_index])
    new_index = np.cumsum(keep_env) - 1
    b = ro.batch
    batch = dataclasses.replace(b, **{k: getattr(b, k)[rows] for k in _batch_fields(b)
                                      if getattr(b, k) is not None})
    per_row = {k: [getattr(ro, k)[r] for r in rows] for k in PER_ROW if getattr(ro, k)}
    per_row.update({k: getattr(ro, k)[rows] for k in PER_ROW_ARRAYS if getattr(ro, k) is not None})
    per_env = {k: getattr(ro, k)[keep_env] for k in PER_ENV if getattr(ro, k) is not None}
    return dataclasses.replace(ro, batch=batch, env_index=new_index[ro.env_index[rows]], **per_row, **per_env)


def concat_rollouts(parts: list):
    """One rollout from several (env indices are shifted so each part keeps its own envs)."""
    first = parts[0]
    if len(parts) == 1:
        return first
    b = first.batch
    batch_kw = {}
    for k in _batch_fields(b):
        values = [getattr(p.batch, k) for p in parts]
        batch_kw[k] = None if any(v is None for v in values) else np.concatenate(values)
    offsets = np.cumsum([0] + [len(p.success) for p in parts[:-1]])
    per_row = {k: [x for p in parts for x in getattr(p, k)] for k in PER_ROW
               if all(getattr(p, k) for p in parts)}
    per_row.update({k: np.concatenate([getattr(p, k) for p in parts]) for k in PER_ROW_ARRAYS
                    if all(getattr(p, k) is not None for p in parts)})
    per_env = {k: np.concatenate([getattr(p, k) for p in parts]) for k in PER_ENV
               if all(getattr(p, k) is not None for p in parts)}
    return dataclasses.replace(
        first, batch=dataclasses.replace(b, **batch_kw),
        env_index=np.concatenate([p.env_index + o for p, o in zip(parts, offsets)]), **per_row, **per_env,
        gen_seconds=sum(p.gen_seconds for p in parts), env_seconds=sum(p.env_seconds for p in parts))


def dynamic_sample(first, more, want_groups: int, max_rounds: int):
    """Keep the informative groups of ``first`` and of ``more(1)``, ``more(2)``, ... (each a new rollout
    of new tasks) until ``want_groups`` are kept or ``max_rounds`` rollouts (``first`` included) were
    made; trim to ``want_groups``. Outcome = the env's episode return. If no group is informative after
    the last round, ``first`` is returned whole (there is nothing better to train on).
    Returns (rollout, stats)."""
    if max_rounds < 1 or want_groups < 1:
        raise ValueError(f"need max_rounds >= 1 and want_groups >= 1; got {max_rounds}, {want_groups}")
    kept, n_kept, rounds, ro = [], 0, 0, first
    while True:
        rounds += 1
        groups = env_groups(ro)
        good = informative_groups(groups, ro.episode_return)[:want_groups - n_kept]
        if len(good):
            kept.append(select_envs(ro, np.isin(groups, good)))
            n_kept += len(good)
        if n_kept >= want_groups or rounds >= max_rounds:
            break
        ro = more(rounds)
    stats = {"ds_rounds": rounds, "ds_kept_groups": n_kept}
    return (concat_rollouts(kept) if kept else first), stats
