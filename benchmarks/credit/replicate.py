"""``bipace-compare``'s default: rerun the credit leaderboard's cells on this machine with a new seed, say
whether each replicates its committed batch, pool the ones that do, print the verdict, draw the leaderboard.

    bipace-compare                            # the cells that fit 15 minutes (today: both TextCraft ones)
    bipace-compare --budget 40                # more of them
    bipace-compare --cells webshop-eps0.3     # named cells
    bipace-compare --full                     # every cell; its wall time is stated first; a rerun continues

Which cells fit comes from ``cells.py`` and the committed batches' ``timing.json``, so new or changed cells
flow in. A rerun is the cell's own command (``advantage_accuracy --cell NAME``) with seed ``--seed``: on goals
outside every committed batch where the candidates allow another batch (``Cell.replication == "disjoint"``,
then pooled with the committed batches if every pair agrees), else on the committed batch's goals with new
episodes and a new truth ("same-goals", compared and never pooled: the goals are shared). A pair replicates
when the two 95% intervals overlap and each batch that puts it beyond 0 sees the other on the same side.

Outputs in ``--out``: ``cells/<cell>/`` (each rerun; its log in ``cells/<cell>.log``),
``cells/<cell>-pooled/``, ``leaderboard.md`` and ``leaderboard.png`` (committed and rerun columns side by
side), ``summary.md`` (what is printed at the end), ``compare.json`` (marks the folder as this command's).
"""
from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.credit.advantage_report import DECOMPOSITION
from benchmarks.credit.cells import CELLS, Cell

REPO = Path(__file__).resolve().parents[2]
RERUN_SEED = 101
BUDGET_MIN = 15.0
OVERHEAD_S = 90.0        # loading and converting the embedding model, pools, tables and the figure
MARKER = "compare.json"
WARM_START_S = 15 * 60   # building the TextCraft table's SmolLM2 warm start once (11-20 min on 2 cores)
# manifest keys a cell fixes: a committed batch must still agree with cells.py on every one of them
CELL_KEYS = ("preset", "set", "policy", "env", "splits", "ingredients", "candidates", "tasks", "group_size",
             "samples", "screen_repeats", "truth", "chunk", "embed_model", "policy_state")
METRIC = "pearson"
DECOMPOSITION_PAIRS = tuple(f"{a} - {b}" for a, b in DECOMPOSITION)


def decomposition_first(pairs) -> list[str]:
    """``pairs`` with BiPACE's decomposition first (its order), then the rest sorted."""
    pairs = set(pairs)
    return [p for p in DECOMPOSITION_PAIRS if p in pairs] + sorted(pairs - set(DECOMPOSITION_PAIRS))


class CompareInputError(ValueError):
    """What the user asked cannot start: named cell, folder or budget."""


@dataclass(frozen=True)
class CellPlan:
    """One cell to rerun: its committed batches and what one batch took to make."""
    name: str
    cell: Cell
    cost_s: float


def repo_path(rel: str) -> Path:
    return REPO / rel


def batch_cost(folder: Path) -> float:
    """Seconds one committed batch took (``leaderboard.batch_seconds``)."""
    from benchmarks.credit.leaderboard import batch_seconds
    if not (folder / "timing.json").is_file():
        raise CompareInputError(f"{folder} has no timing.json: the committed cell is incomplete; restore it "
                                "from git (git checkout -- docs/results)")
    return batch_seconds(folder)


def cell_cost(name: str) -> float:
    """Seconds a rerun of cell ``name`` takes: its slowest committed batch, and for the SmolLM2 warm start's
    cell the warm start's SFT when it is not built yet."""
    from benchmarks.credit import aa_settings
    cell = CELLS[name]
    cost = max(batch_cost(repo_path(b)) for b in cell.batches)
    warm = Path(aa_settings.build_parser().get_default("warm_start"))
    if not cell.policy and not (warm / "config.json").exists():
        cost += WARM_START_S
    return cost


def cell_settings(name: str) -> dict:
    """The manifest a run of cell ``name`` writes, on the keys the cell fixes (no model is loaded)."""
    from benchmarks.credit import aa_settings
    from benchmarks.credit.advantage_accuracy import manifest_settings
    args = aa_settings.build_parser().parse_args(["--cell", name])
    _, cfg = aa_settings.settings(args)
    policy = args.policy or args.warm_start       # the default policy's folder, never built here
    full = json.loads(json.dumps(manifest_settings(args, cfg, policy), default=str))
    return {k: full.get(k) for k in CELL_KEYS}


def check_committed(name: str) -> list[str]:
    """What is wrong with cell ``name``'s committed folders (missing, or made with other settings than
    ``cells.py`` now gives: every key a cell fixes, the candidate splits only in the first batch); empty
    when they can be compared with."""
    cell, problems = CELLS[name], []
    if not cell.batches:
        return [f"{name}: cells.py names no committed batch"]
    want = cell_settings(name)
    for k, rel in enumerate(cell.batches):
        folder = repo_path(rel)
        missing = [f for f in ("manifest.json", "goals.json", "pairs.csv", "timing.json")
                   if not (folder / f).is_file()]
        if missing:
            problems.append(f"{name}: committed batch {folder} is missing {', '.join(missing)}")
            continue
        have = json.loads((folder / "manifest.json").read_text())
        # a later batch may widen the candidate splits to find goals outside the first (--splits)
        diff = [key for key in CELL_KEYS if have.get(key) != want[key] and not (k and key == "splits")]
        if diff:
            shown = "; ".join(f"{key}: {have.get(key)!r} there, {want[key]!r} in cells.py" for key in diff)
            problems.append(f"{name}: committed batch {folder} was made with other settings than cells.py "
                            f"gives now ({shown}); rerun the cell into it or fix cells.py")
    if not (repo_path(cell.shown) / "pairs.csv").is_file():
        problems.append(f"{name}: the leaderboard's folder {repo_path(cell.shown)} has no pairs.csv")
    return problems


def plan_cells(names: list[str] | None, full: bool, budget_min: float) -> tuple[list[CellPlan], str]:
    """The cells to rerun and a line saying why: ``names``, every cell (``full``), or the cheapest that fit
    ``budget_min`` together. Refuses, before any work, a committed folder that is missing or stale and a
    budget that fits nothing."""
    chosen = list(names) if names else list(CELLS)
    problems = [p for n in CELLS for p in check_committed(n)]     # the leaderboard shows every cell
    if problems:
        raise CompareInputError("committed cells cannot be compared with:\n  " + "\n  ".join(problems))
    plans = sorted((CellPlan(n, CELLS[n], cell_cost(n)) for n in chosen), key=lambda p: p.cost_s)
    if names or full:
        total = sum(p.cost_s for p in plans) + OVERHEAD_S
        return plans, (f"{len(plans)} cell(s), about {total / 60:.0f} min from their committed timings "
                       "(2-core CPU)")
    room, picked = budget_min * 60 - OVERHEAD_S, []
    for p in plans:
        if p.cost_s <= room:
            picked.append(p)
            room -= p.cost_s
    if not picked:
        cheapest = plans[0]
        raise CompareInputError(f"a budget of {budget_min:g} min fits no cell: the cheapest, "
                                f"{cheapest.name}, takes about {(cheapest.cost_s + OVERHEAD_S) / 60:.1f} "
                                "min; raise --budget")
    left = [p.name for p in plans if p not in picked]
    return picked, (f"{len(picked)} cell(s) that fit {budget_min:g} min, about "
                    f"{(sum(p.cost_s for p in picked) + OVERHEAD_S) / 60:.0f} min from their committed "
                    f"timings" + (f". Not rerun (--full or --cells NAME): {', '.join(left)}" if left else ""))


MODES = {"cells": "the leaderboard cells' reruns", "warm-start": "the warm-start policy and RL runs"}


def claim_out(out: Path, mode: str = "cells") -> None:
    """Refuse a folder that holds another command's files, or bipace-compare's other ``mode``; mark it as
    this mode's. A warm-start folder made before the marks existed has none and is continued; the cells'
    path takes only an empty folder or its own."""
    marker = out / MARKER
    if marker.exists():
        other = json.loads(marker.read_text()).get("mode")
        if other != mode:
            raise CompareInputError(f"{out} holds {MODES.get(other, repr(other))} (bipace-compare mode "
                                    f"{other!r}); choose another --out for mode {mode!r}")
    elif mode == "cells" and out.exists() and any(p.name != ".lock" for p in out.iterdir()):
        shown = ", ".join(sorted(p.name for p in out.iterdir())[:5])
        raise CompareInputError(f"{out} holds files of another command ({shown}); choose another --out or "
                                "empty it")
    out.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"command": "bipace-compare", "mode": mode}) + "\n")


# ------------------------------------------------------------------------------------------ progress
class Progress:
    """One bar for the whole command, in seconds of the cells' committed timings: the cell and its stage
    in the description, the ETA from how fast this machine goes through them."""

    def __init__(self, plans: list[CellPlan], enabled: bool = True):
        from tqdm.auto import tqdm
        self.costs = {p.name: p.cost_s for p in plans}
        self.done, self.cell, self.t0 = 0.0, None, time.perf_counter()
        self.enabled = enabled
        self.bar = tqdm(total=round(sum(self.costs.values())), unit="s", file=sys.stderr, disable=not enabled,
                        bar_format="{desc} |{bar}| {percentage:3.0f}% [{elapsed}<{remaining}]")
        self.stop = threading.Event()
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        self.ticker.start()

    def _tick(self):
        while not self.stop.wait(1.0):
            self._show()

    def _show(self):
        if self.cell is not None:
            inside = min(time.perf_counter() - self.t0, 0.98 * self.costs[self.cell])
            self.bar.n = round(self.done + inside)
            self.bar.refresh()

    def stage(self, cell: str, stage: str):
        """Say ``cell``'s ``stage``; a label that is no cell (the pools and the figure) only says it."""
        if cell != self.cell and cell in self.costs:
            self.cell, self.t0 = cell, time.perf_counter()
        self.bar.set_description_str(f"{cell}: {stage}")
        if not self.enabled:
            print(f"{cell}: {stage}", flush=True)
        self._show()

    def finish_cell(self, cell: str):
        self.done += self.costs[cell]
        self.cell = None
        self.bar.n = round(self.done)
        self.bar.refresh()

    def close(self):
        self.stop.set()
        self.bar.close()


# ------------------------------------------------------------------------------------------ reruns
def rerun(plan: CellPlan, out: Path, seed: int, progress: Progress) -> Path:
    """The cell's command with ``seed`` into ``out/cells/<cell>`` (continued if it is there), its printout
    in ``out/cells/<cell>.log``."""
    from benchmarks.credit import advantage_accuracy as aa
    folder, cell = out / "cells" / plan.name, plan.cell
    argv = ["--cell", plan.name, "--seed", str(seed), "--out", str(folder), "--no-progress", "--resume"]
    if cell.replication == "disjoint":
        argv += ["--exclude", *(str(repo_path(b)) for b in cell.batches)]
    else:
        goals = out / "cells" / f"{plan.name}.goals"
        goals.parent.mkdir(parents=True, exist_ok=True)
        committed = json.loads((repo_path(cell.batches[0]) / "goals.json").read_text())
        goals.write_text("\n".join(committed) + "\n")
        argv += ["--goals", str(goals)]
    log = out / "cells" / f"{plan.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        aa.run(aa.build_parser().parse_args(argv), lambda stage: progress.stage(plan.name, stage))
    return folder


@dataclass
class PairCheck:
    pair: str
    committed: tuple        # (diff, lo, hi, beyond)
    rerun: tuple
    agree: bool
    why: str


def check_pair(pair: str, a: tuple, b: tuple) -> PairCheck:
    """Do two batches' paired differences agree: intervals overlap, and a batch that puts the pair beyond 0
    sees the other on the same side of it."""
    overlap = a[1] <= b[2] and b[1] <= a[2]
    flips = [x for x, y in ((a, b), (b, a)) if x[3] and math.copysign(1, x[0]) != math.copysign(1, y[0])]
    reasons = (("intervals apart", not overlap), ("a separated sign flips", bool(flips)))
    why = "; ".join(w for w, bad in reasons if bad)
    return PairCheck(pair, a, b, overlap and not flips, why)


def check_replication(committed, rerun_col, metric: str = METRIC) -> list[PairCheck]:
    """Every pair both columns (``leaderboard.Column``) scored, BiPACE's decomposition first."""
    keys = [p for (p, m) in committed.pairs if m == metric and (p, metric) in rerun_col.pairs
            and all(math.isfinite(x) for v in (committed.pairs[p, metric], rerun_col.pairs[p, metric])
                    for x in v[:3])]
    return [check_pair(p, committed.pairs[p, metric], rerun_col.pairs[p, metric])
            for p in decomposition_first(keys)]


def _d(v: tuple) -> str:
    return f"{v[0]:+.3f} [{v[1]:+.3f}, {v[2]:+.3f}]" + (" *" if v[3] else "")


def replication_lines(name: str, how: str, checks: list[PairCheck]) -> tuple[bool, list[str]]:
    """(replicates, markdown lines): the decomposition's pairs always, other pairs when separated or apart."""
    ok = all(c.agree for c in checks)
    head = (f"**{name}: {'replicates' if ok else 'DOES NOT REPLICATE'}** ({how}): "
            f"{sum(c.agree for c in checks)} of {len(checks)} pairs agree")
    lines = [head]
    for c in checks:
        if c.pair in DECOMPOSITION_PAIRS or not c.agree or c.committed[3] or c.rerun[3]:
            lines.append(f"  - {c.pair}: committed {_d(c.committed)}, rerun {_d(c.rerun)}: "
                         + ("agree" if c.agree else f"disagree ({c.why})"))
    return ok, lines


# ------------------------------------------------------------------------------------------ verdict
def separated(col, metric: str = METRIC) -> list[str]:
    """A column's pairs beyond their interval, BiPACE's decomposition first."""
    keys = decomposition_first(p for (p, m), v in col.pairs.items() if m == metric and v[3])
    return [f"{p} {_d(col.pairs[p, metric])[:-2]}" for p in keys]


def verdict_lines(results: list[tuple[str, str, object]]) -> list[str]:
    """Per env, each cell's separated pairs: ``results`` holds (env, where the column comes from, Column)."""
    lines = ["Verdict (Pearson r, paired 95% jackknife-t intervals over goals; the pairs beyond them):"]
    for env in dict.fromkeys(e for e, _, _ in results):
        lines.append(f"- **{env}**")
        for e, where, col in results:
            if e == env:
                seps = separated(col)
                low = "; its truth is mostly noise (LOW reliability), not ranked" if col.low else ""
                lines.append(f"  - {col.label} ({where}{low}): "
                             + ("; ".join(seps) if seps else "no pair separated at this size"))
    return lines


def run_cells(names: list[str] | None, out: Path, full: bool = False, budget_min: float = BUDGET_MIN,
              seed: int = RERUN_SEED, progress: bool = True) -> str:
    """The whole default command; returns the summary it prints and writes."""
    from benchmarks.credit import advantage_accuracy as aa
    from benchmarks.credit.forest import forest_plot
    from benchmarks.credit.leaderboard import read_column, tables
    from agents.presets import get_preset
    plans, why = plan_cells(names, full, budget_min)        # every committed folder checked first
    if seed in {json.loads((repo_path(b) / "manifest.json").read_text()).get("seed")
                for p in plans for b in p.cell.batches}:
        raise CompareInputError(f"--seed {seed} is a committed batch's seed: a rerun with it replays that "
                                "batch and checks nothing; pick another")
    claim_out(out)
    print(f"bipace-compare: rerunning {', '.join(p.name for p in plans)} with seed {seed}: {why}. Logs in "
          f"{out / 'cells'}", flush=True)
    bar = Progress(plans, progress)
    reruns, failed = {}, []
    t0 = time.perf_counter()
    try:
        for p in plans:
            try:
                reruns[p.name] = rerun(p, out, seed, bar)
            except (SystemExit, ValueError, FileNotFoundError) as exc:      # said, not hidden: the rest go on
                failed.append(f"**{p.name}: failed** ({exc}); its log: {out / 'cells' / (p.name + '.log')}")
            bar.finish_cell(p.name)
        bar.stage("all cells", "pooling and drawing")
        checked, columns, results, fresh = [], [], [], set()
        for name, cell in CELLS.items():
            env = get_preset(cell.preset).env
            committed = read_column(f"{name}={repo_path(cell.shown)}")
            columns.append(committed)
            if name not in reruns:
                parts = f", {len(committed.parts)} batches pooled" if committed.parts else ""
                results.append((env, "committed" + parts, committed))
                continue
            mine = read_column(f"{name} rerun={reruns[name]}")
            columns.append(mine)
            fresh.add(mine.label)
            same = cell.replication == "same-goals"
            against = read_column(f"{name}={repo_path(cell.batches[0])}") if same else committed
            how = (f"seed {seed} on the committed goals, new episodes and truth" if same else
                   f"seed {seed} on goals outside the committed batches, against their "
                   + ("pool" if committed.parts else "batch"))
            ok, lines = replication_lines(name, how, check_replication(against, mine))
            checked.append((ok, lines))
            if ok and not same:
                pooled = out / "cells" / f"{name}-pooled"
                with open(out / "cells" / f"{name}.log", "a") as f, contextlib.redirect_stdout(f):
                    aa.run(aa.build_parser().parse_args(
                        ["--pool", *(str(repo_path(b)) for b in cell.batches), str(reruns[name]),
                         "--out", str(pooled)]))
                col = read_column(f"{name} pooled={pooled}")
                columns.append(col)
                fresh.add(col.label)
                results.append((env, "committed batches and the rerun here, pooled", col))
            else:
                results.append((env, "rerun here" + ("" if ok else ", disagrees with the committed batch"),
                                mine))
        (out / "leaderboard.md").write_text(tables(columns) + "\n")
        png = forest_plot(columns, out / "leaderboard.png", fresh=fresh)
    finally:
        bar.close()
    checked.sort(key=lambda c: c[0])          # a rerun that disagrees is said first
    lines = failed + [line for _, ls in checked for line in ls]
    text = ("## Replication: each rerun against its committed batch\n\n" + "\n".join(lines) + "\n\n"
            + "## " + "\n".join(verdict_lines(results)) + "\n\n"
            + f"(* beyond the interval.) Tables: {out / 'leaderboard.md'}; figure: {png}; "
            + f"wall time {(time.perf_counter() - t0) / 60:.1f} min.\n")
    (out / "summary.md").write_text(text)
    return text
