"""`StepBatch`: the per-step records every estimator reads (one row = one LLM call = one env step).

Rows may arrive in any order (verl-agent's `_balance_batch` permutes them); estimators work in the
canonical order (group_id, traj_id, step_idx) computed once by `canonical_view`, so no result
depends on row order. Validation happens at construction so that a bad field is reported by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np


def to_hashable(value: Any):
    """Hashable form of an anchor or action key (verl-agent's `to_hashable`: ndarray -> flat tuple,
    dict -> sorted tuple of items, list -> tuple)."""
    if isinstance(value, np.ndarray):
        return tuple(value.ravel().tolist())
    if isinstance(value, dict):
        return tuple(sorted((k, to_hashable(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(to_hashable(v) for v in value)
    try:
        hash(value)
    except TypeError as exc:
        raise ValueError(f"value {value!r} of type {type(value).__name__} is not hashable") from exc
    return value


def _as_1d(name: str, values, n: Optional[int]) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"StepBatch.{name} must be 1-D with one entry per step row; got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"StepBatch.{name} has {arr.shape[0]} rows but group_id has {n}; "
                         "every field needs one entry per step row")
    return arr


def _codes(name: str, values: np.ndarray) -> np.ndarray:
    """Dense int codes that follow the sorted order of the ids (so 'traj_id sorted' is well defined)."""
    try:
        _, inverse = np.unique(values, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"StepBatch.{name} ids must be mutually sortable (all ints or all strings); "
                         f"got {exc}") from exc
    return inverse.reshape(-1).astype(np.int64)


def hashable_codes(values) -> np.ndarray:
    """Dense int codes of hashable values in order of first appearance."""
    table: dict = {}
    return np.fromiter((table.setdefault(to_hashable(v), len(table)) for v in values),
                       dtype=np.int64, count=len(values))


# How each optional StepBatch field is produced, for the error of an estimator that needs a missing one.
FIELD_SOURCES = {
    "anchor": "the env's per-step observation key (info['anchor']; agents.rollout records it)",
    "action_key": "estimators.action_key(response_text) of every row (agents.rollout records it, kind "
                  "--key-kind)",
    "embedding": "the policy's hidden states at the last prompt token: roll out with capture_hidden=True "
                 "(bipace-train --capture-hidden true; the verl bridge records them for estimators "
                 "that need them)",
    "resp_len": "agents.ppo.row_logp_sums(response_ids, old_logprobs), passed with batch.with_fields(...)",
    "old_logp_sum": "agents.ppo.row_logp_sums(response_ids, old_logprobs), passed with "
                    "batch.with_fields(...)",
    "hind_logp_sum": "the hindsight scoring pass: agents.hindsight.score_hindsight(...) after the rollout, "
                     "passed with batch.with_fields(hind_logp_sum=...) (bipace-train and the verl bridge "
                     "run it for estimators that need it)",
}


def missing_field_error(estimator: str, name: str) -> ValueError:
    """The error of an estimator run on a batch without a field it needs: the field and how to make it."""
    how = FIELD_SOURCES.get(name, f"pass {name}= when building the batch")
    return ValueError(f"estimator {estimator!r} needs StepBatch.{name}, which is None; produce it with "
                      f"{how}")


@dataclass
class StepBatch:
    """Per-step records of a batch of rollouts (numpy arrays, one row per agent step).

    Only rows where the episode was still active belong here (verl-agent drops inactive rows), and
    padding copies must not: compute on the unpadded batch and broadcast to copies afterwards.
    """

    group_id: np.ndarray
    """(N,) rollout group: the G rollouts of one task share it (verl-agent `uid`)."""
    traj_id: np.ndarray
    """(N,) trajectory id; a trajectory is the pair (group_id, traj_id), so 0..G-1 works."""
    step_idx: np.ndarray
    """(N,) int position of the step in its trajectory (verl-agent leaves it implicit)."""
    reward: np.ndarray
    """(N,) float env reward of this step (already mapped, e.g. 10 on success)."""
    action_valid: np.ndarray
    """(N,) bool format validity of the response; invalid rows get the post-discount penalty."""
    anchor: Optional[np.ndarray] = None
    """(N,) hashable observation key (GiGPO/HGPO/PACE groups); ndarray/dict/list are converted."""
    action_key: Optional[np.ndarray] = None
    """(N,) hashable PACE key (see `estimators.keys.action_key`)."""
    embedding: Optional[np.ndarray] = None
    """(N, d) hidden states for BiGPO clustering; l2-normalised inside (zero rows stay zero)."""
    resp_len: Optional[np.ndarray] = None
    """(N,) int number of valid response tokens of the row (GACA; 0 = empty response)."""
    old_logp_sum: Optional[np.ndarray] = None
    """(N,) float sum over the response tokens of log pi_old (the rollout policy's log-probs, the same
    numbers as the PPO ratio's old_log_prob); GACA's criticality is -old_logp_sum / resp_len."""
    hind_logp_sum: Optional[np.ndarray] = None
    """(N,) float sum of log-probs of the same response tokens, teacher-forced under an outcome-augmented
    prompt (spec-2 sections 4.2, 5.2); NaN = row not scored. HCAPO/RELACE read it; the scoring pass is
    ``agents.hindsight``."""
    _view: Optional["CanonicalView"] = field(default=None, init=False, repr=False, compare=False)
    _field_codes: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.group_id = _as_1d("group_id", self.group_id, None)
        n = self.group_id.shape[0]
        self.traj_id = _as_1d("traj_id", self.traj_id, n)
        step = _as_1d("step_idx", self.step_idx, n)
        if n and not np.issubdtype(step.dtype, np.integer):
            if not np.issubdtype(step.dtype, np.floating) or not np.all(np.isfinite(step)) \
                    or not np.all(step == np.round(step)):
                raise ValueError(f"StepBatch.step_idx must hold integers; got dtype {step.dtype}")
        self.step_idx = step.astype(np.int64)
        if n and self.step_idx.min() < 0:
            raise ValueError(f"StepBatch.step_idx must be >= 0; row {int(np.argmin(self.step_idx))} "
                             f"has {int(self.step_idx.min())}")
        reward = _as_1d("reward", self.reward, n)
        if n and not (np.issubdtype(reward.dtype, np.number) or reward.dtype == bool):
            raise ValueError(f"StepBatch.reward must be numeric; got dtype {reward.dtype}")
        self.reward = reward.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(self.reward))
        if bad.size:
            raise ValueError(f"StepBatch.reward must be finite; rows {bad[:10].tolist()} are "
                             f"{self.reward[bad[:10]].tolist()} (fix the reward source or drop those rows)")
        valid = _as_1d("action_valid", self.action_valid, n)
        if valid.dtype != bool:
            if n and not np.all(np.isin(valid, (0, 1))):
                raise ValueError("StepBatch.action_valid must be bool (or 0/1); got values "
                                 f"{np.unique(valid)[:5].tolist()}")
            valid = valid.astype(bool)
        self.action_valid = valid
        if self.anchor is not None:
            self.anchor = self._object_field("anchor", self.anchor, n)
        if self.action_key is not None:
            self.action_key = self._object_field("action_key", self.action_key, n)
        if self.embedding is not None:
            emb = np.asarray(self.embedding)
            if emb.ndim != 2 or emb.shape[0] != n or emb.shape[1] < 1:
                raise ValueError(f"StepBatch.embedding must have shape (N, d) = ({n}, d>=1); got {emb.shape}")
            if not np.issubdtype(emb.dtype, np.number):
                raise ValueError(f"StepBatch.embedding must be numeric; got dtype {emb.dtype}")
            emb = emb.astype(np.float32, copy=False)
            finite = np.isfinite(emb).all(axis=1)
            if not finite.all():
                rows = np.flatnonzero(~finite)[:10].tolist()
                raise ValueError(f"StepBatch.embedding has NaN or inf in rows {rows}; the policy's hidden "
                                 "states overflowed: use float32/bf16 instead of fp16 or drop those rows")
            self.embedding = emb
        self._check_scores(n)
        if n:
            self._check_unique_steps()

    def _check_scores(self, n: int) -> None:
        """Per-row numbers from the trainer (response lengths and log-prob sums)."""
        if self.resp_len is not None:
            length = _as_1d("resp_len", self.resp_len, n)
            if n and (not np.issubdtype(length.dtype, np.number) or not np.all(length == np.round(length))
                      or length.min() < 0):
                raise ValueError("StepBatch.resp_len must hold integer token counts >= 0; got "
                                 f"{np.unique(length)[:5].tolist()}")
            self.resp_len = length.astype(np.int64)
        for name, nan_ok in (("old_logp_sum", False), ("hind_logp_sum", True)):
            value = getattr(self, name)
            if value is None:
                continue
            arr = _as_1d(name, value, n)
            if n and not np.issubdtype(arr.dtype, np.number):
                raise ValueError(f"StepBatch.{name} must be numeric; got dtype {arr.dtype}")
            arr = arr.astype(np.float64)
            bad = np.flatnonzero(np.isinf(arr) | (np.isnan(arr) & (not nan_ok)))
            if bad.size:
                allowed = "finite or NaN (not scored)" if nan_ok else "finite"
                raise ValueError(f"StepBatch.{name} must be {allowed}; rows {bad[:10].tolist()} are "
                                 f"{arr[bad[:10]].tolist()}")
            setattr(self, name, arr)

    @staticmethod
    def _object_field(name: str, values, n: int) -> np.ndarray:
        if isinstance(values, np.ndarray) and values.ndim == 2 and values.shape[0] == n:
            values = list(values)  # one array-valued anchor per row
        if len(values) != n:
            raise ValueError(f"StepBatch.{name} has {len(values)} rows but group_id has {n}")
        out = np.empty(n, dtype=object)
        for i, v in enumerate(values):
            try:
                out[i] = to_hashable(v)
            except ValueError as exc:
                raise ValueError(f"StepBatch.{name}[{i}]: {exc}") from None
        return out

    def _check_unique_steps(self) -> None:
        view = self.view
        key = np.stack([view.traj[view.order], self.step_idx[view.order]], axis=1)
        dup = np.flatnonzero(np.all(key[1:] == key[:-1], axis=1))
        if dup.size:
            row = int(view.order[dup[0] + 1])
            raise ValueError(
                f"StepBatch has duplicate rows for trajectory (group_id={self.group_id[row]!r}, "
                f"traj_id={self.traj_id[row]!r}) step_idx={int(self.step_idx[row])}; compute advantages on "
                "the unpadded batch and copy them to padding duplicates afterwards")

    def with_fields(self, **fields_) -> "StepBatch":
        """A copy with some fields replaced (validated again), e.g. the trainer's per-row scores:
        ``batch.with_fields(resp_len=lengths, old_logp_sum=sums)``."""
        return replace(self, **fields_)

    def __len__(self) -> int:
        return int(self.group_id.shape[0])

    def field_codes(self, name: str) -> np.ndarray:
        """Dense int codes of an object field (``anchor``, ``action_key``) in order of first appearance,
        computed once per batch: several estimators' groupings key on the same field."""
        if name not in self._field_codes:
            values = getattr(self, name)      # made hashable at construction (`_object_field`)
            table: dict = {}
            self._field_codes[name] = np.fromiter((table.setdefault(v, len(table)) for v in values),
                                                  dtype=np.int64, count=len(values))
        return self._field_codes[name]

    @property
    def view(self) -> "CanonicalView":
        if self._view is None:
            self._view = CanonicalView.build(self)
        return self._view


@dataclass
class CanonicalView:
    """Integer codes and the canonical row order shared by all estimators."""

    group: np.ndarray      # (N,) dense group code, sorted like group_id
    traj: np.ndarray       # (N,) dense trajectory code, sorted like (group_id, traj_id)
    order: np.ndarray      # (N,) row indices in canonical order (group, traj, step)
    pos: np.ndarray        # (N,) rank of the row inside its trajectory (0 = first step)
    n_groups: int
    n_trajs: int

    @classmethod
    def build(cls, batch: StepBatch) -> "CanonicalView":
        group = _codes("group_id", batch.group_id)
        traj_in_group = _codes("traj_id", batch.traj_id)
        order = np.lexsort((batch.step_idx, traj_in_group, group))
        pair = np.stack([group, traj_in_group], axis=1)[order]
        new_traj = np.ones(len(order), dtype=bool)
        new_traj[1:] = np.any(pair[1:] != pair[:-1], axis=1)
        traj_sorted = np.cumsum(new_traj) - 1
        traj = np.empty_like(traj_sorted)
        traj[order] = traj_sorted
        starts = np.flatnonzero(new_traj)
        pos_sorted = np.arange(len(order)) - np.repeat(starts, np.diff(np.append(starts, len(order))))
        pos = np.empty_like(pos_sorted)
        pos[order] = pos_sorted
        n_groups = int(group.max()) + 1 if len(group) else 0
        return cls(group, traj, order, pos, n_groups, int(traj_sorted[-1]) + 1 if len(order) else 0)
