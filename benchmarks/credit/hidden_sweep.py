"""BiGPO and BiPACE over every layer, pooling, centring and radius, against the Monte-Carlo truth, with the
controls that tell hidden-state geometry from coarser groups, and a setting chosen on one half of the goals
and scored on the other.

    python -m benchmarks.credit.layer_states runs/cells/textcraft-eps0.8      # once per batch (minutes)
    python -m benchmarks.credit.hidden_sweep --cell textcraft-eps0.8=runs/cells/textcraft-eps0.8 \
        --cell webshop-eps0.5=runs/cells/webshop-eps0.5,runs/cells/webshop-eps0.5-b \
        --out docs/results/hidden-states

A cell is one or more batch folders of ``advantage_accuracy.py`` (pooled, goals kept apart, as the
leaderboard's columns) that also hold ``layer_states.npz``. Per cell it writes, under ``--out/<cell>/``:

- ``auc.csv``: per layer x pooling x raw/centred, the ROC AUC of the cosine similarity of two rows of the same
  goal for "same replayed env state" against "different", over all such pairs and over the pairs whose
  prompts differ (identical prompts have identical states, which says nothing about geometry);
- ``sweep.csv``: per layer (``LAYER_FRACTIONS`` of the depth and the best-AUC blocks) x pooling x raw/centred
  x radius (radii chosen
  by the number of clusters they give, from exact duplicates to one cluster per goal; raw states collapse
  below eps 0.01, so eps itself is a poor axis): clusters, singleton and impure rates, and Pearson r of bigpo
  and bipace with its controls (size-matched random partitions, averaged over draws; one group per goal) and
  the differences with jackknife-t intervals over goals;
- ``selection.json`` (``hidden_select.py``): the goals' split (fixed by ``--seed``), the points that score
  best on half A with their paired differences on half B, and the named settings (the paper's among them,
  chosen in advance) on both halves and on all goals.

Scores use the leaderboard's common normalisation (``mean_norm``) and the cell's estimator options. Reports:
``hidden_report.py``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.credit.advantage_metrics import ranks
from benchmarks.credit.hidden_cells import (CENTRINGS, DRAWS, PAIRS, POOLINGS, Cell, Part,  # noqa: F401
                                            advantages, block_of, clusters, difference, impure, load_cell,
                                            load_part, n_clusters, random_partitions, score_point, states)

LAYER_FRACTIONS = (0.25, 0.5, 17 / 28, 0.75, 1.0)     # 17/28: the paper's hidden_states[-12] of 28 blocks
RADIUS_POINTS = 7           # cluster counts from exact duplicates to one cluster per goal, geometric
EXACT_EPS = 1e-6            # "exact": rows whose states coincide up to float error
PAPER_EPS = 0.05           # the paper's radius (agents/bigpo_settings.py "paper"), scored at every point


# ------------------------------------------------------------------------------------------------ AUC
def pair_auc(scores: np.ndarray, same: np.ndarray) -> float:
    """ROC AUC of ``scores`` for ``same`` (Mann-Whitney, ties counted half); NaN without both kinds."""
    n_pos = int(same.sum())
    n_neg = len(same) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = ranks(scores) + 1.0                 # 1-based ranks
    return float((r[same].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def auc_rows(cell: Cell) -> list[dict]:
    """AUC per block x pooling x centring, over within-goal pairs of all rows and of distinct prompts."""
    pair_index = []
    for p in cell.parts:
        g = p.batch.view.group
        for grp in np.unique(g):
            rows = np.flatnonzero(g == grp)
            i, j = np.triu_indices(len(rows), k=1)
            pair_index.append((p, rows[i], rows[j]))
    same = np.concatenate([p.state[i] == p.state[j] for p, i, j in pair_index])
    distinct = np.concatenate([p.prompt[i] != p.prompt[j] for p, i, j in pair_index])
    out = []
    for block in range(cell.n_layers):
        for pooling in POOLINGS:
            for centring in CENTRINGS:
                cos = []
                for p, i, j in pair_index:
                    x = states(p, block, pooling, centring)
                    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
                    cos.append(np.einsum("ij,ij->i", x[i], x[j]))
                cos = np.concatenate(cos)
                out.append({"cell": cell.name, "block": block + 1, "depth": (block + 1) / cell.n_layers,
                            "pooling": pooling, "centring": centring, "pairs": len(same),
                            "same_pairs": int(same.sum()), "auc": pair_auc(cos, same),
                            "distinct_pairs": int(distinct.sum()),
                            "same_distinct_pairs": int((same & distinct).sum()),
                            "auc_distinct": pair_auc(cos[distinct], same[distinct])})
    return out


# ---------------------------------------------------------------------------------------------- sweep
def radius_for(cell: Cell, block: int, pooling: str, centring: str, target: int, steps: int = 18) -> float:
    """The radius (bisection on log eps) whose cluster count is closest to ``target``."""
    lo, hi = np.log(EXACT_EPS), np.log(2.0)
    best = (np.inf, EXACT_EPS)
    for _ in range(steps):
        mid = (lo + hi) / 2
        k = n_clusters(clusters(cell, block, pooling, centring, float(np.exp(mid))))
        best = min(best, (abs(k - target), float(np.exp(mid))))
        if k == target:
            break
        lo, hi = (mid, hi) if k > target else (lo, mid)
    return best[1]


@dataclass(frozen=True)
class Grid:
    """The sweep's axes: HF hidden_states indices (1..L or negative; None: ``LAYER_FRACTIONS`` of the depth),
    poolings, centrings, and radii scored beside the cluster-count-spaced ones."""
    layers: tuple | None = None
    poolings: tuple = POOLINGS
    centrings: tuple = CENTRINGS
    radii: tuple = (PAPER_EPS,)

    def blocks(self, n_layers: int, auc_best: tuple = ()) -> list[int]:
        """0-based blocks, each checked against the model's depth; by default ``LAYER_FRACTIONS`` of the depth
        and the blocks (``auc_best``) whose states best tell same from different env states, a choice made
        from the states alone, never from the truth that scores them."""
        from agents.models import layer_module_index
        if self.layers is None:
            return sorted({block_of(f, n_layers) for f in LAYER_FRACTIONS} | set(auc_best))
        return sorted({layer_module_index(int(layer), n_layers) for layer in self.layers})

    def check(self) -> None:
        bad = [p for p in self.poolings if p not in POOLINGS]
        bad += [c for c in self.centrings if c not in CENTRINGS]
        if bad:
            raise ValueError(f"unknown pooling or centring {bad}; poolings: {POOLINGS}, "
                             f"centrings: {CENTRINGS}")
        for eps in self.radii:
            if not np.isfinite(eps) or eps < 0:
                raise ValueError(f"a radius must be a finite cosine distance >= 0; got {eps}")


def sweep(cell: Cell, seed: int, grid: Grid = Grid(), auc_best: tuple = (), progress=print) -> list[dict]:
    floor = sum(len(np.unique(p.batch.view.group)) for p in cell.parts)      # one cluster per goal
    rows = []
    for block in grid.blocks(cell.n_layers, auc_best):
        for pooling in grid.poolings:
            for centring in grid.centrings:
                t0 = time.perf_counter()
                exact = n_clusters(clusters(cell, block, pooling, centring, EXACT_EPS))
                targets = np.unique(np.round(np.geomspace(exact, floor, RADIUS_POINTS)).astype(int))[::-1]
                radii = {EXACT_EPS if t == exact else 2.0 if t == floor else
                         radius_for(cell, block, pooling, centring, int(t)) for t in targets}
                for eps in sorted(radii | set(grid.radii)):
                    rows.append(point_row(cell, block, pooling, centring, eps, seed))
                progress(f"{cell.name}: block {block + 1}/{cell.n_layers} {pooling} {centring}: "
                         f"{len(radii | set(grid.radii))} radii in {time.perf_counter() - t0:.0f} s")
    return rows


def point_row(cell: Cell, block: int, pooling: str, centring: str, eps: float, seed: int) -> dict:
    codes = clusters(cell, block, pooling, centring, eps)
    singleton = np.concatenate([np.bincount(c)[c] == 1 for c in codes]).mean()
    by_state, by_truth = impure(cell, codes)
    rng = np.random.default_rng([seed, block, POOLINGS.index(pooling), CENTRINGS.index(centring),
                                 int(eps * 1e9)])
    return {"cell": cell.name, "block": block + 1, "depth": (block + 1) / cell.n_layers, "pooling": pooling,
            "centring": centring, "eps": eps, "clusters": n_clusters(codes),
            "singleton": float(singleton), "impure_state": by_state, "impure_truth": by_truth,
            **score_point(cell, codes, cell.members, rng)}


def parse_cell(text: str) -> tuple[str, list[Path]]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--cell takes NAME=FOLDER[,FOLDER...]; got {text!r}")
    name, folders = text.split("=", 1)
    return name, [Path(f) for f in folders.split(",") if f]


def run_cell(name: str, folders: list[Path], out: Path, seed: int, grid: Grid = Grid()) -> dict:
    """Write ``out/<name>/{auc.csv, sweep.csv, selection.json}``; a cell whose three files exist is kept."""
    from benchmarks.credit.hidden_report import write_csv
    folder = out / name
    done = [folder / f for f in ("auc.csv", "sweep.csv", "selection.json")]
    if all(f.exists() for f in done):
        return json.loads(done[2].read_text())
    grid.check()
    cell = load_cell(name, folders)
    grid.blocks(cell.n_layers)          # a layer outside the model's depth stops here, before any work
    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    auc = auc_rows(cell)
    write_csv(folder / "auc.csv", auc)
    # the block that best tells states apart, per pooling and centring: chosen from the states alone
    auc_best = set()
    for pooling in grid.poolings:
        for centring in grid.centrings:
            mine = [r for r in auc if r["pooling"] == pooling and r["centring"] == centring
                    and np.isfinite(r["auc_distinct"])]
            if mine:
                auc_best.add(int(max(mine, key=lambda r: r["auc_distinct"])["block"]) - 1)
    rows = sweep(cell, seed, grid, tuple(sorted(auc_best)), progress=lambda s: print(s, flush=True))
    write_csv(folder / "sweep.csv", rows)
    from benchmarks.credit.hidden_select import select_and_score
    selection = select_and_score(cell, rows, seed)
    selection.update(folders=[str(f) for f in folders], seconds=time.perf_counter() - t0,
                     n_goals=len(cell.members), n_rows=len(cell.adv), n_layers=cell.n_layers)
    (folder / "selection.json").write_text(json.dumps(selection, indent=1))
    return selection


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cell", action="append", type=parse_cell, required=True,
                   help="NAME=FOLDER[,FOLDER...]: batch folders pooled into one cell (repeat per cell)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--seed", type=int, default=0, help="fixes the split of each cell's goals in halves")
    p.add_argument("--layers", type=int, nargs="+", default=None,
                   help="HF hidden_states indices to sweep (1..L, or -1 for the last block; default: "
                        "1/4, 1/2, 17/28, 3/4 and all of the depth)")
    p.add_argument("--poolings", nargs="+", default=list(POOLINGS), help=f"of {POOLINGS}")
    p.add_argument("--centrings", nargs="+", default=list(CENTRINGS), help=f"of {CENTRINGS}")
    p.add_argument("--radii", type=float, nargs="+", default=[PAPER_EPS],
                   help="radii scored at every point beside those spaced by cluster count")
    args = p.parse_args(argv)
    grid = Grid(None if args.layers is None else tuple(args.layers), tuple(args.poolings),
                tuple(args.centrings), tuple(args.radii))
    try:
        grid.check()
    except ValueError as exc:
        p.error(str(exc))
    for name, folders in args.cell:
        try:
            run_cell(name, folders, args.out, args.seed, grid)
        except (ValueError, FileNotFoundError) as exc:
            p.error(f"cell {name}: {exc}")
        print(f"{args.out / name}: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
