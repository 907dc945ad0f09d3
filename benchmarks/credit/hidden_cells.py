"""The cells of the hidden-state study and what scores them: a cell's batches with their layer states and
truth (``load_cell``), BiGPO's clusters of any block, pooling, centring and radius (``clusters``), GiGPO's
and PACE's formulas within any partition (``advantages``), size-matched random partitions, and one sweep
point's Pearson r with its controls and paired differences (``score_point``). ``hidden_sweep.py`` sweeps
with them, ``hidden_select.py`` chooses with them.

    cell = load_cell("textcraft-eps0.8", [Path("runs/cells/textcraft-eps0.8")])
    codes = clusters(cell, block=17, pooling="last", centring="raw", eps=0.05)
    row = score_point(cell, codes, cell.members, np.random.default_rng(0))
"""
from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from benchmarks.credit.advantage_metrics import corr
from benchmarks.credit.intervals import goal_members, jackknife_t

POOLINGS = ("last", "mean")
CENTRINGS = ("raw", "centred")
DRAWS = 20                  # size-matched random partitions per sweep point
PAIRS = (("bigpo", "gigpo"), ("bipace", "pace"), ("bipace", "gigpo"), ("bigpo", "gigpo_goal"),
         ("bipace", "pace_goal"), ("bigpo", "bigpo_random"), ("bipace", "bipace_random"))


@dataclass
class Part:
    """One batch: its StepBatch, estimator options, truth inputs and layer states."""
    label: str
    model: str                  # the model preset whose named BiGPO settings apply (agents/bigpo_settings.py)
    batch: object
    options: dict
    inputs: object
    last: np.ndarray
    mean: np.ndarray
    state: np.ndarray
    prompt: np.ndarray          # a code per distinct prompt


@dataclass
class Cell:
    name: str
    parts: list
    goal: np.ndarray            # pooled goal label per row
    adv: np.ndarray             # pooled MC advantage
    members: list

    @property
    def n_layers(self) -> int:
        return self.parts[0].last.shape[1]

    @cached_property
    def baselines(self) -> dict:
        """The anchor estimators and the one-group-per-goal controls: the same at every sweep point."""
        from estimators import compute_advantages
        return {n: np.concatenate([compute_advantages(p.batch, n, **p.options) for p in self.parts])
                for n in ("gigpo", "pace", "gigpo_goal", "pace_goal")}


def load_part(folder: Path, label: str) -> Part:
    from benchmarks.credit.aa_settings import cell_config
    from benchmarks.credit.layer_states import FILE, check_layer_states
    from benchmarks.credit.score_inputs import ScoreInputs
    folder = Path(folder)
    for need in ("batch.pkl", "score_inputs.npz", FILE):
        if not (folder / need).exists():
            hint = (f"python -m benchmarks.credit.layer_states {folder}" if need == FILE else
                    f"python -m benchmarks.credit.advantage_accuracy --cell NAME --out {folder}")
            raise FileNotFoundError(f"{folder} has no {need}; make it with `{hint}`")
    with np.load(folder / FILE) as z:
        check_layer_states(folder, str(z["manifest"]))
        last, mean, state = z["last"], z["mean"], z["state"]
    saved = pickle.loads((folder / "batch.pkl").read_bytes())
    inputs, _ = ScoreInputs.load(folder / "score_inputs.npz")
    manifest = json.loads((folder / "manifest.json").read_text())
    cfg = cell_config(manifest)
    options = cfg.estimator_kwargs(mode="mean_norm")
    batch = saved["ro"].batch
    if not len(batch) == len(inputs.adv) == len(last):
        raise ValueError(f"{folder}: batch.pkl ({len(batch)} rows), score_inputs.npz ({len(inputs.adv)}) and "
                         f"{FILE} ({len(last)}) disagree; rerun the cell and layer_states")
    from estimators import compute_advantages
    for name in ("gigpo", "pace"):      # the options and rows are those the leaderboard scored
        if not np.allclose(compute_advantages(batch, name, **options), inputs.estimates["common"][name].adv):
            raise ValueError(f"{folder}: {name} on batch.pkl with the preset's options differs from the "
                             "committed score_inputs.npz; rescore the cell (advantage_accuracy --rescore)")
    _, prompt = np.unique([hash(tuple(p.tolist())) for p in saved["ro"].prompt_ids], return_inverse=True)
    return Part(label, cfg.model, batch, options, inputs, last, mean, state, prompt.reshape(-1))


def load_cell(name: str, folders: list[Path]) -> Cell:
    parts = [load_part(f, f"{i}") for i, f in enumerate(folders)]
    depths = {p.last.shape[1:] for p in parts}
    if len(depths) > 1:
        raise ValueError(f"cell {name}: its batches were embedded by models of different shapes {depths}")
    goal = np.concatenate([np.char.add(f"{p.label}:", p.inputs.goal.astype(str)) for p in parts])
    return Cell(name, parts, goal, np.concatenate([p.inputs.adv for p in parts]), goal_members(goal))


def block_of(fraction: float, n_layers: int) -> int:
    """0-based block whose output lies at ``fraction`` of the depth (HF hidden_states[round(f L)])."""
    return max(1, round(n_layers * fraction)) - 1


def states(part: Part, block: int, pooling: str, centring: str) -> np.ndarray:
    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; expected one of {POOLINGS}")
    if centring not in CENTRINGS:
        raise ValueError(f"unknown centring {centring!r}; expected one of {CENTRINGS}")
    if not 0 <= block < part.last.shape[1]:
        raise ValueError(f"block {block} is outside the model's {part.last.shape[1]} blocks")
    x = (part.last if pooling == "last" else part.mean)[:, block].astype(np.float64)
    return x - x.mean(axis=0) if centring == "centred" else x


def clusters(cell: Cell, block: int, pooling: str, centring: str, eps: float) -> list[np.ndarray]:
    """BiGPO's clusters of each batch at radius ``eps`` (codes per batch)."""
    from estimators import bigpo_clusters
    return [bigpo_clusters(p.batch.with_fields(embedding=states(p, block, pooling, centring)
                                               .astype(np.float32)), eps) for p in cell.parts]


def n_clusters(codes: list[np.ndarray]) -> int:
    return sum(len(np.unique(c)) for c in codes)


def advantages(cell: Cell, codes: list[np.ndarray], formula: str) -> np.ndarray:
    from estimators.coarse import within_partition
    return np.concatenate([within_partition(p.batch, c, formula, **p.options)
                           for p, c in zip(cell.parts, codes)])


def random_partitions(cell: Cell, codes: list[np.ndarray], rng) -> list[np.ndarray]:
    """The same cluster sizes in every goal, rows assigned at random within the goal."""
    out = []
    for p, c in zip(cell.parts, codes):
        shuffled = np.empty_like(c)
        g = p.batch.view.group
        for grp in np.unique(g):
            rows = np.flatnonzero(g == grp)
            shuffled[rows] = c[rng.permutation(rows)]
        out.append(shuffled)
    return out


def impure(cell: Cell, codes: list[np.ndarray]) -> tuple[float, float]:
    """(share of rows in a cluster of several replayed env states, share in a cluster whose states' MC values
    differ: the chi-square test of ``advantage_report.impure_rows``)."""
    from benchmarks.credit.advantage_report import impure_rows
    from estimators.grouping import dense_codes
    by_state, by_truth = [], []
    for p, c in zip(cell.parts, codes):
        _, first = np.unique(dense_codes(c, p.state), return_index=True)    # one row per (cluster, state)
        by_state.append(np.bincount(c[first], minlength=int(c.max()) + 1)[c] > 1)
        by_truth.append(impure_rows(c, p.inputs.start, p.inputs.start_v, p.inputs.start_se))
    return float(np.concatenate(by_state).mean()), float(np.concatenate(by_truth).mean())


def mean_r(est, adv: np.ndarray, idx: np.ndarray) -> float:
    """Pearson r of advantages ``est`` with ``adv`` on rows ``idx``; of a list of them (draws), the mean."""
    if isinstance(est, list):
        return float(np.mean([corr(x[idx], adv[idx]) for x in est]))
    return corr(est[idx], adv[idx])


def difference(est: dict, a: str, b: str, adv: np.ndarray, members: list) -> tuple[float, float, float]:
    """Pearson r of ``a`` minus that of ``b`` (``mean_r``) with a jackknife-t interval over ``members``."""
    d, lo, hi = jackknife_t(lambda idx: np.array([mean_r(est[a], adv, idx) - mean_r(est[b], adv, idx)]),
                            members)
    return float(d[0]), float(lo[0]), float(hi[0])


def score_point(cell: Cell, codes: list[np.ndarray], members: list, rng, pairs=PAIRS) -> dict:
    """Pearson r of bigpo/bipace on ``codes``, their controls, and the paired differences over ``members``."""
    est = dict(cell.baselines)
    est["bigpo"], est["bipace"] = advantages(cell, codes, "gigpo"), advantages(cell, codes, "pace")
    draws = [random_partitions(cell, codes, rng) for _ in range(DRAWS)]
    est["bigpo_random"] = [advantages(cell, d, "gigpo") for d in draws]
    est["bipace_random"] = [advantages(cell, d, "pace") for d in draws]
    idx = np.concatenate(members)
    out = {f"r_{n}": mean_r(v, cell.adv, idx) for n, v in est.items()}
    for a, b in pairs:
        d, lo, hi = difference(est, a, b, cell.adv, members)
        out.update({f"{a}-{b}": d, f"{a}-{b}_lo": lo, f"{a}-{b}_hi": hi})
    return out
