"""The leaderboard as one picture: a forest plot of every estimator's paired difference against GiGPO
(Pearson r at the common normalisation, with its 95% interval), one panel per env x policy column.

    python -m benchmarks.credit.leaderboard docs/results/truth-v2/textcraft-eps0.5 ... --png leaderboard.png
    from benchmarks.credit.forest import forest_plot
    forest_plot([leaderboard.read_column(f) for f in folders], Path("leaderboard.png"), fresh={"mine"})

A pair whose interval excludes 0 is drawn filled and dark, one that does not is hollow and pale, so separated
pairs stand out at a glance; columns named in ``fresh`` (rerun on this machine) get a differently coloured
panel title and marker, so a user tells what they measured from what was committed. A column whose truth is
mostly noise (reliability below ``LOW_RELIABILITY``) says so in its title. ``bipace - pace`` (hidden states on
top of action keys) is the last row of every panel.
"""
from __future__ import annotations

import math
from pathlib import Path

from benchmarks.credit.advantage_report import BASELINE

EXTRA_PAIRS = ("bipace - pace",)
COMMITTED_COLOUR, FRESH_COLOUR = "#1f4e79", "#b03a2e"


def pair_rows(cols, metric: str = "pearson") -> list[str]:
    """The pairs on the y axis: every ``X - gigpo`` any column scored, ordered by their mean difference over
    the columns (best on top), then the extra pairs."""
    pairs = {p for c in cols for (p, m) in c.pairs if m == metric and p.endswith(f" - {BASELINE}")}

    def mean_diff(p):
        vals = [c.pairs[p, metric][0] for c in cols if (p, metric) in c.pairs
                and math.isfinite(c.pairs[p, metric][0])]
        return sum(vals) / len(vals) if vals else -math.inf

    ordered = sorted(pairs, key=mean_diff, reverse=True)
    return ordered + [p for p in EXTRA_PAIRS if any((p, metric) in c.pairs for c in cols)]


def forest_plot(cols, path: Path, fresh=frozenset(), metric: str = "pearson", title: str = "") -> Path:
    """Draw ``cols`` (``leaderboard.Column``) into ``path`` (PNG); ``fresh``: labels of the columns rerun
    here. Returns ``path``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if not cols:
        raise ValueError("no columns to draw")
    rows = pair_rows(cols, metric)
    if not rows:
        raise ValueError(f"no paired differences against {BASELINE} in {metric} in these folders")
    ncol = min(4, len(cols))
    nrow = math.ceil(len(cols) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(3.4 * ncol + 1.6, 0.28 * len(rows) * nrow + 1.4 * nrow),
                             sharex=True, sharey=True, squeeze=False)
    ys = list(range(len(rows)))[::-1]
    for k, ax in enumerate(axes.flat):
        if k >= len(cols):
            ax.axis("off")
            continue
        c = cols[k]
        is_fresh = c.label in fresh
        colour = FRESH_COLOUR if is_fresh else COMMITTED_COLOUR
        for y, p in zip(ys, rows):
            v = c.pairs.get((p, metric))
            if v is None or not math.isfinite(v[0]):
                continue
            diff, lo, hi, beyond = v
            ax.plot([lo, hi], [y, y], color=colour, lw=2.2 if beyond else 1.0, alpha=1.0 if beyond else 0.45)
            ax.plot([diff], [y], marker="D" if is_fresh else "o", ms=6 if beyond else 5, color=colour,
                    mfc=colour if beyond else "white", alpha=1.0 if beyond else 0.7)
            if (p, metric) in c.conflicts:
                ax.annotate("‡", (hi, y), xytext=(3, -3), textcoords="offset points", fontsize=8)
        ax.axvline(0, color="0.3", lw=0.8)
        ax.grid(axis="x", alpha=0.3)
        where = "rerun here" if is_fresh else "committed"
        rel = f"rel. {c.reliability:.2f}" if math.isfinite(c.reliability) else "rel. n/a"
        pooled = f", {len(c.parts)} batches" if c.parts else ""
        ax.set_title(f"{c.label}\n({where}; {rel}{pooled}{'; LOW' if c.low else ''})", fontsize=8.5,
                     color=colour)
        ax.tick_params(axis="x", labelsize=7.5, labelbottom=True)      # shared x: every panel keeps its ticks
        ax.set_xlabel("paired difference in " + ("Pearson r" if metric == "pearson" else metric), fontsize=8)
    for ax in axes[:, 0]:
        ax.set_yticks(ys)
        ax.set_yticklabels(rows, fontsize=8)
    fresh_note = "; red diamonds: rerun on this machine" if fresh else ""
    fig.suptitle(title or f"Paired difference against {BASELINE} (95% jackknife-t over goals); filled: the "
                 f"interval excludes 0{fresh_note}", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
