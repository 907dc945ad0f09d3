"""What the scores of ``advantage_report.py`` read, per row: the rows' Monte-Carlo truth (A, its standard
error, the state each row acted in with that state's value and SE, the expert's A) and every estimator's
advantages and step groups, at its own normalisation and at the common one. ``advantage_accuracy.py``
builds it once per batch and keeps it in the run folder as score_inputs.npz (numbers only), which
``--rescore`` reads back and ``--pool`` joins across batches:

    own = estimator_advantages(batch, options)                   # {name: Estimate}; n/a ones say why
    common = estimator_advantages(batch, options, mode="mean_norm")     # advantage_report.COMMON_MODE
    inputs = ScoreInputs.of(truth, groups, expert_adv, own, common, halves)
    inputs.save(out / "score_inputs.npz", won=won)
    inputs, extra = ScoreInputs.load(path)                       # extra: what save was given
    pooled = ScoreInputs.pool([a, b], ["a", "b"])                # goals and states stay apart
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


class NonFiniteAdvantages(ValueError):
    """An estimator returned NaN or inf on the batch."""


@dataclass
class Estimate:
    """One estimator's advantages on the batch and its step groups (None without a step level), or why it
    could not run (``reason``)."""
    adv: np.ndarray | None
    codes: np.ndarray | None = None
    reason: str = ""


def estimator_advantages(batch, options: dict, names=None, mode: str | None = None) -> dict[str, Estimate]:
    """Every registered estimator (or ``names``) on ``batch`` with ``options`` (the trainer's: gamma, mode,
    eps, ...); ``mode`` overrides every estimator's normalisation. One that needs a field the batch lacks,
    or rejects ``mode``, is reported with why; one that returns a non-finite value is an error naming it."""
    from estimators import REGISTRY, available_estimators, compute_advantages, step_groups
    from estimators.batch import missing_field_error
    options = dict(options) if mode is None else {**options, "mode": mode}
    out = {}
    for name in names or available_estimators():
        missing = [f for f in REGISTRY[name].needs if getattr(batch, f) is None]
        if missing:
            out[name] = Estimate(None, reason=str(missing_field_error(name, missing[0])))
            continue
        try:
            adv = np.asarray(compute_advantages(batch, name, **options), dtype=float)
        except ValueError as exc:
            if mode is None:
                raise
            out[name] = Estimate(None, reason=f"not defined at mode={mode}: {exc}")
            continue
        bad = np.flatnonzero(~np.isfinite(adv))
        if len(bad):
            raise NonFiniteAdvantages(
                f"estimator {name!r} returned {len(bad)} non-finite advantage(s) (first rows "
                f"{bad[:5].tolist()}: {adv[bad[:5]].tolist()}) with options {options}; fix the estimator or "
                "its options")
        out[name] = Estimate(adv, step_groups(batch, name, **options))
    return out


def add_estimators(inputs: "ScoreInputs", batch, options: dict, common_mode: str) -> list[str]:
    """Score every registered estimator that ``inputs`` lacks on ``batch`` (the rows it was made from, checked
    by re-scoring GiGPO), at their own and at the ``common_mode`` normalisation, into ``inputs``; returns
    their names."""
    from estimators import available_estimators
    if len(batch) != len(inputs.adv):
        raise ValueError(f"batch.pkl has {len(batch)} rows, score_inputs.npz {len(inputs.adv)}: not the same "
                         "batch")
    check = estimator_advantages(batch, options, ["gigpo"], mode=common_mode)["gigpo"].adv
    if not np.allclose(check, inputs.estimates["common"]["gigpo"].adv):
        raise ValueError("gigpo on batch.pkl differs from score_inputs.npz's: the batch or the estimator "
                         "options are not those the run scored; rerun the batch")
    names = [n for n in available_estimators() if n not in inputs.estimates["common"]]
    if names:
        inputs.estimates["own"].update(estimator_advantages(batch, options, names))
        inputs.estimates["common"].update(estimator_advantages(batch, options, names, mode=common_mode))
    return names


@dataclass
class ScoreInputs:
    """Everything the scores read, per row; ``pool`` joins several batches (goals and states stay apart)."""
    goal: np.ndarray              # goal label of each row (a batch's rollout group)
    adv: np.ndarray               # MC advantage A
    se: np.ndarray                # its standard error (floored)
    start: np.ndarray             # the state each row acted in (an id)
    start_v: np.ndarray           # per row: the MC value of its state and that value's standard error
    start_se: np.ndarray
    expert_adv: np.ndarray | None
    estimates: dict = field(default_factory=dict)    # {"own": {name: Estimate}, "common": {...}}
    noise_var: np.ndarray | None = None  # per row: the unfloored sampling variance of A (mc_noise)
    halves: np.ndarray | None = None     # (2, rows): A from each half of the continuations (split-half)

    @classmethod
    def of(cls, truth, groups, expert_adv, own: dict, common: dict, halves=None) -> "ScoreInputs":
        return cls(np.asarray(groups).astype(str), truth.adv, truth.se, np.asarray(truth.row_start),
                   truth.v, truth.v_se, expert_adv, {"own": own, "common": common}, truth.noise_var,
                   None if halves is None else np.asarray(halves, dtype=float))

    def reliability(self) -> tuple[float, float]:
        """(1 - mean(noise) / var(A), the split-half correlation stepped up by Spearman-Brown): the share of
        A's spread across rows that is not sampling noise, two ways; NaN where not recorded (runs before
        2026-12-07). The first ignores that rows sharing a state share its error (``mc_noise`` corrects for
        that in one batch); over a batch's hundreds of rows the two agree (docs/advantage-accuracy.md)."""
        from benchmarks.credit.mc_noise import reliability_of
        unbiased = (reliability_of(self.adv, float(np.mean(self.noise_var)))
                    if self.noise_var is not None else float("nan"))
        split = float("nan")
        if self.halves is not None and min(np.std(self.halves[0]), np.std(self.halves[1])) > 0:
            r = float(np.corrcoef(self.halves[0], self.halves[1])[0, 1])
            split = 2 * r / (1 + r)
        return unbiased, split

    def save(self, path: Path, **extra) -> None:
        """Write to a compressed .npz (numbers only, no pickle: small enough to keep beside the docs)."""
        arrays = {k: getattr(self, k) for k in ("goal", "adv", "se", "start", "start_v", "start_se")}
        for name in ("expert_adv", "noise_var", "halves"):
            if getattr(self, name) is not None:
                arrays[name] = getattr(self, name)
        reasons = {}
        for kind, ests in self.estimates.items():
            for name, e in ests.items():
                if e.adv is None:
                    reasons[f"{kind}/{name}"] = e.reason
                    continue
                arrays[f"{kind}/{name}/adv"] = e.adv
                if e.codes is not None:
                    arrays[f"{kind}/{name}/codes"] = np.asarray(e.codes)
        arrays["meta"] = np.array(json.dumps({"reasons": reasons, **extra}))
        np.savez_compressed(path, **arrays)

    @classmethod
    def load(cls, path: Path) -> tuple["ScoreInputs", dict]:
        """(inputs, the ``extra`` given to ``save``)."""
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            estimates: dict = {"own": {}, "common": {}}
            for key in z.files:
                parts = key.split("/")
                if len(parts) == 3 and parts[2] == "adv":
                    codes = z.get(f"{parts[0]}/{parts[1]}/codes")
                    estimates[parts[0]][parts[1]] = Estimate(z[key], codes)
            for key, reason in meta.pop("reasons").items():
                kind, name = key.split("/")
                estimates[kind][name] = Estimate(None, reason=reason)
            optional = {k: z[k] if k in z.files else None for k in ("expert_adv", "noise_var", "halves")}
            inputs = cls(z["goal"].astype(str), z["adv"], z["se"], z["start"], z["start_v"], z["start_se"],
                         optional["expert_adv"], estimates, optional["noise_var"], optional["halves"])
        return inputs, meta

    @classmethod
    def pool(cls, parts: list["ScoreInputs"], labels: list[str]) -> "ScoreInputs":
        starts, offset = [], 0
        for p in parts:
            starts.append(p.start + offset)
            offset += int(p.start.max()) + 1
        estimates = {}
        for kind in ("own", "common"):
            names = sorted(set.intersection(*(set(p.estimates[kind]) for p in parts)))
            estimates[kind] = {n: _pooled_estimate([p.estimates[kind][n] for p in parts]) for n in names}

        def joined(name, axis=0):
            return (None if any(getattr(p, name) is None for p in parts)
                    else np.concatenate([getattr(p, name) for p in parts], axis=axis))
        expert = joined("expert_adv")
        return cls(np.concatenate([np.char.add(f"{lab}:", p.goal) for lab, p in zip(labels, parts)]),
                   np.concatenate([p.adv for p in parts]), np.concatenate([p.se for p in parts]),
                   np.concatenate(starts), np.concatenate([p.start_v for p in parts]),
                   np.concatenate([p.start_se for p in parts]), expert, estimates, joined("noise_var"),
                   joined("halves", axis=1))


def _pooled_estimate(parts: list[Estimate]) -> Estimate:
    if any(e.adv is None for e in parts):
        return Estimate(None, reason=next(e.reason for e in parts if e.adv is None))
    codes, offset = None, 0
    if all(e.codes is not None for e in parts):
        codes = []
        for e in parts:
            codes.append(np.asarray(e.codes) + offset)
            offset += int(np.max(e.codes)) + 1
        codes = np.concatenate(codes)
    return Estimate(np.concatenate([e.adv for e in parts]), codes)
