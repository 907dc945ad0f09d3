"""The credit leaderboard: several finished ``advantage_accuracy`` runs (one env x policy cell each) side by
side, one table per metric (estimators x cells) and one of paired differences against GiGPO per metric.

    R=docs/results/advantage-accuracy
    python -m benchmarks.credit.leaderboard textcraft-smollm2=$R/aa_tc_2plus_pooled $R/textcraft-eps0.5 ... \\
        --out $R/leaderboard.md --doc docs/advantage-accuracy.md --png docs/leaderboard.png

Each argument is a run folder (``--out`` of the benchmark or of its ``--pool``), optionally ``LABEL=FOLDER``
(default label: the folder's name). Figures are at one normalisation (mean_norm, the report's "common"
scores), so that differences measure credit, not normalisation; intervals are the runs' own (95%
jackknife-t over goals). ``--doc`` replaces what lies between ``<!-- leaderboard:start -->`` and
``<!-- leaderboard:end -->`` in that file with the tables. Under the Pearson table, the rank agreement of
every two columns (Kendall's tau over the estimators both scored) says whether two policies order the
estimators alike. ``--png`` draws the paired differences as one forest plot (``forest.py``).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from benchmarks.credit.advantage_report import BASELINE, HIGHER_BETTER, LABELS, LOW_RELIABILITY, METRICS
from benchmarks.stats import kendall_tau_b

START, END = "<!-- leaderboard:start -->", "<!-- leaderboard:end -->"


@dataclass
class Column:
    """One run folder's common-normalisation scores and paired differences."""
    label: str
    scores: dict        # (estimator, metric) -> (value, lo, hi)
    pairs: dict         # (pair, metric) -> (diff, lo, hi, beyond)
    reliability: float = math.nan      # the truth's (reliability.json; NaN: not recorded)
    conflicts: frozenset = frozenset()  # (pair, metric) whose pooled batches are apart in sign, each beyond 0
    parts: tuple = ()                   # the batches a pooled folder joins (its parts.json)

    @property
    def low(self) -> bool:
        return math.isfinite(self.reliability) and self.reliability < LOW_RELIABILITY

    @property
    def heading(self) -> str:
        rel = f"rel. {self.reliability:.2f}" if math.isfinite(self.reliability) else "rel. n/a"
        pooled = f", {len(self.parts)} batches pooled" if self.parts else ""
        return f"{self.label} ({rel}{pooled}{', LOW: not ranked' if self.low else ''})"


def _float(text: str) -> float:
    return float(text) if text not in ("", None) else math.nan


def read_pairs(folder: Path) -> dict:
    """(pair, metric) -> (diff, lo, hi, beyond) of a run folder's pairs.csv at the common normalisation."""
    pairs = {}
    with open(folder / "pairs.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["normalisation"] == "common" and r["metric"] in METRICS:
                pairs[r["pair"], r["metric"]] = (_float(r["diff"]), _float(r["lo"]), _float(r["hi"]),
                                                 r["beyond_interval"] == "True")
    return pairs


def sign_conflicts(parts: list[dict]) -> frozenset:
    """(pair, metric) where one batch puts the difference beyond 0 one way and another the other way."""
    out = set()
    for key in set().union(*parts) if parts else ():
        signs = {math.copysign(1, p[key][0]) for p in parts if key in p and p[key][3]}
        if len(signs) > 1:
            out.add(key)
    return frozenset(out)


def _part_folder(folder: Path, part: str) -> Path:
    """A part named in parts.json: as written (from where the pool ran), else beside the pooled folder."""
    path = Path(part)
    return path if path.is_dir() else folder.parent / path.name


def labelled(spec: str) -> tuple[str, Path]:
    """``LABEL=FOLDER`` or ``FOLDER`` -> (label, folder); the label defaults to the folder's name."""
    label, sep, folder = spec.partition("=")
    folder = Path(folder if sep else label)
    return (label if sep else folder.name), folder


def read_column(spec: str) -> Column:
    """``LABEL=FOLDER`` or ``FOLDER`` -> its Column; a folder without the report's CSVs is refused."""
    label, folder = labelled(spec)
    missing = [n for n in ("scores.csv", "pairs.csv") if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder}: no {' or '.join(missing)}; pass the --out folder of a finished "
                                "advantage_accuracy run (or of its --pool)")
    scores = {}
    with open(folder / "scores.csv", newline="") as f:
        for r in csv.DictReader(f):
            if r["normalisation"] == "common" and r["metric"] in METRICS:
                scores[r["estimator"], r["metric"]] = (_float(r["value"]), _float(r["lo"]), _float(r["hi"]))
    pairs = read_pairs(folder)
    if not scores:
        raise ValueError(f"{folder}/scores.csv holds no common-normalisation scores; rerun the benchmark "
                         "there")
    rel = folder / "reliability.json"
    reliability = json.loads(rel.read_text()).get("unbiased") if rel.exists() else None
    parts, conflicts = (), frozenset()
    if (folder / "parts.json").exists():
        parts = tuple(json.loads((folder / "parts.json").read_text()))
        missing = [p for p in parts if not (_part_folder(folder, p) / "pairs.csv").is_file()]
        if missing:
            raise FileNotFoundError(f"{folder}/parts.json names batches without pairs.csv: {missing}")
        conflicts = sign_conflicts([read_pairs(_part_folder(folder, p)) for p in parts])
    return Column(label, scores, pairs, math.nan if reliability is None else float(reliability), conflicts,
                  parts)


def _value(v) -> str:
    if v is None or not math.isfinite(v[0]):
        return "n/a"
    return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"


def _diff(v, conflict: bool = False) -> str:
    if v is None or not math.isfinite(v[0]):
        return "n/a"
    text = f"{v[0]:+.3f} [{v[1]:+.3f}, {v[2]:+.3f}]"
    return (f"**{text}**" if v[3] else text) + (" ‡" if conflict else "")


def disattenuated_score(c: Column, name: str, metric: str = "pearson"):
    """(r, lo, hi) / sqrt(the column's reliability); None without a positive reliability."""
    v = c.scores.get((name, metric))
    if v is None or not (math.isfinite(c.reliability) and c.reliability > 0):
        return None
    return tuple(x / math.sqrt(c.reliability) for x in v)


def rank_agreement(cols: list[Column], metric: str = "pearson") -> list[str]:
    """Markdown lines: Kendall's tau of every two columns' estimator scores on ``metric``."""
    lines = []
    for i, a in enumerate(cols):
        for b in cols[i + 1:]:
            names = sorted(n for (n, m) in a.scores if m == metric and (n, m) in b.scores
                           and math.isfinite(a.scores[n, m][0]) and math.isfinite(b.scores[n, m][0]))
            tau = kendall_tau_b([a.scores[n, metric][0] for n in names],
                                [b.scores[n, metric][0] for n in names])
            lines.append(f"- {a.label} vs {b.label}: Kendall tau {tau:+.2f} over {len(names)} estimators")
    return lines


def tables(cols: list[Column]) -> str:
    """Every metric's score table and its paired-difference table, as markdown."""
    if not cols:
        raise ValueError("no run folders given")
    estimators = sorted({n for c in cols for (n, _) in c.scores})
    out = []
    for metric in METRICS:
        def value(c, n):
            return c.scores.get((n, metric), (math.nan,))[0]

        if not any(math.isfinite(value(c, n)) for c in cols for n in estimators):
            continue        # a metric no column scored (e.g. the expert's ρ on scripted policies)
        sign = -1 if HIGHER_BETTER[metric] else 1

        def rank_key(n):        # a column whose truth is mostly noise does not rank
            vals = [value(c, n) for c in cols if math.isfinite(value(c, n)) and not c.low]
            # estimators scored on every column first, then those some columns could not score
            return (len(cols) - len(vals), sign * sum(vals) / len(vals) if vals else math.inf)

        head = ("| estimator | " + " | ".join(c.heading for c in cols) + " |\n"
                + "|---" * (len(cols) + 1) + "|")
        better = "higher" if HIGHER_BETTER[metric] else "lower"
        out.append(f"#### {LABELS[metric]} ({better} is better)\n\n{head}")
        out += [f"| {n} | " + " | ".join(_value(c.scores.get((n, metric))) for c in cols) + " |"
                for n in sorted(estimators, key=rank_key)]
        if metric == "pearson":
            out += ["", "Rank agreement of the columns (estimators ordered by Pearson r):", ""]
            out += rank_agreement(cols, metric)
            out += ["", "Pearson r disattenuated, r / sqrt(reliability): the correlation with the noise-free "
                        "A (interval ends divided alike; the reliability's own uncertainty is left out):", "",
                    head]
            out += [f"| {n} | " + " | ".join(_value(disattenuated_score(c, n)) for c in cols) + " |"
                    for n in sorted(estimators, key=rank_key)]
        pairs = sorted({p for c in cols for (p, m) in c.pairs
                        if m == metric and p.endswith(f" - {BASELINE}")})
        out += ["", f"{LABELS[metric]}, paired difference against {BASELINE} (same goals; **bold**: the "
                "interval excludes 0):", "", head.replace("| estimator |", "| pair |")]
        rows = pairs + [p for p in ("bipace - pace",) if any((p, metric) in c.pairs for c in cols)]
        out += [f"| {p} | " + " | ".join(_diff(c.pairs.get((p, metric)), (p, metric) in c.conflicts)
                                         for c in cols) + " |" for p in rows]
        if any((p, metric) in c.conflicts for c in cols for p in rows):
            out += ["", "‡: the pooled batches put this difference beyond 0 in opposite directions; the pool "
                        "averages a disagreement, read the batches (docs/advantage-accuracy.md)."]
        out.append("")
    return "\n".join(out)


def batch_seconds(folder: Path) -> float:
    """Seconds a batch took to make (``timing.json``): the wall time of the calls that finished it, or the
    sum of its stages where the recorded calls only rescored or finished it."""
    t = json.loads((Path(folder) / "timing.json").read_text())
    truth = t.get("mc_s_total", t.get("mc_s_this_call", 0.0))
    stages = t.get("rollout_s", 0.0) + t.get("embed_s", 0.0) + truth
    return max(t.get("wall_s_total", t.get("wall_s_this_call", 0.0)), stages)


def batch_row(spec: str) -> str:
    """One markdown row of the cells table from a finished batch folder (``LABEL=FOLDER`` or ``FOLDER``):
    its size, screen and batch success, rows and distinct states, the truth's reliability, rows the sign
    column reads, and wall time."""
    from benchmarks.credit.score_inputs import ScoreInputs
    label, folder = labelled(spec)
    need = [n for n in ("manifest.json", "score_inputs.npz", "screen.json", "timing.json")
            if not (folder / n).is_file()]
    if need:
        raise FileNotFoundError(f"{folder}: no {', '.join(need)}; --batches takes finished batch folders "
                                "(not pools)")
    m = json.loads((folder / "manifest.json").read_text())
    inputs, meta = ScoreInputs.load(folder / "score_inputs.npz")
    unbiased, split = inputs.reliability()
    wall = batch_seconds(folder)
    screen = json.loads((folder / "screen.json").read_text())["eval_success"]
    return (f"| `{label}` | {len(set(inputs.goal))} x {m['group_size']}, {m.get('truth', 'plain')} K = "
            f"{m['samples']} | seed {m['seed']}{', disjoint' if m.get('exclude') else ''} | "
            f"{100 * screen:.1f}% | {100 * meta.get('won', math.nan):.1f}% | "
            f"{len(inputs.adv):,} ({len(set(inputs.start.tolist())):,}) | {unbiased:.3f} / {split:.3f} | "
            f"{int((abs(inputs.adv) > 2 * inputs.se).sum())} | {wall / 60:.1f} min |")


BATCH_HEAD = ("| batch | goals x G, truth | seed | screen won | batch won | rows (distinct states) | "
              "reliability (unbiased / split-half) | rows with \\|A\\| > 2 SE | wall |\n"
              "|---|---|---|---|---|---|---|---|---|")


def update_doc(doc: Path, text: str) -> None:
    """Put ``text`` between the leaderboard markers of ``doc``."""
    body = doc.read_text()
    if START not in body or END not in body or body.index(START) > body.index(END):
        raise ValueError(f"{doc} has no '{START}' ... '{END}' block to fill; add those two lines where the "
                         "leaderboard goes")
    head, rest = body.split(START, 1)
    doc.write_text(head + START + "\n" + text + "\n" + END + rest.split(END, 1)[1])


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", metavar="[LABEL=]FOLDER",
                   help="finished advantage_accuracy run folders")
    p.add_argument("--out", type=Path, help="write the tables to this markdown file")
    p.add_argument("--doc", type=Path, help="fill this file's leaderboard block with the tables")
    p.add_argument("--png", type=Path,
                   help="draw the forest plot of the paired differences (forest.py) here")
    p.add_argument("--batches", nargs="+", default=[], metavar="[LABEL=]FOLDER",
                   help="also print the cells table: one row per finished batch folder (size, success, "
                        "reliability, wall time)")
    p.add_argument("--fresh", nargs="+", default=[], metavar="LABEL",
                   help="columns rerun on this machine, drawn apart from committed ones in --png")
    args = p.parse_args(argv)
    try:
        cols = [read_column(r) for r in args.runs]
        unknown = sorted(set(args.fresh) - {c.label for c in cols})
        if unknown:
            raise ValueError(f"--fresh {unknown}: no column has that label; the labels: "
                             f"{[c.label for c in cols]}")
        text = tables(cols)
        if args.batches:
            text = BATCH_HEAD + "\n" + "\n".join(batch_row(b) for b in args.batches) + "\n\n" + text
        if args.doc:
            update_doc(args.doc, text)
        if args.png:
            from benchmarks.credit.forest import forest_plot
            forest_plot(cols, args.png, fresh=set(args.fresh))
    except (FileNotFoundError, ValueError) as e:
        p.error(str(e))
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return text


if __name__ == "__main__":
    main()
