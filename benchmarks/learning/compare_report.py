"""The warm-start path of ``bipace-compare`` (``--policy warm-start --train``): its RL runs' rows read back,
the learning-curve figure and the summary table.

    rows = read_run(Path("runs/compare/runs/grpo_seed0"), "grpo", 0)
    write_outputs(rows, ["grpo"], walls={}, out=Path("runs/compare"), title="...", last=3,
                  episodes_per_iteration=48)
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from benchmarks.plotting import MARKERS, STYLES, data_limits
from benchmarks.stats import ci95, t975

CSV_FIELDS = ["estimator", "seed", "iteration", "success", "score", "singleton_rate", "clusters_per_group",
              "mean_group_size", "estimator_s", "rollout_s", "update_s", "rows", "eval_success", "eval_n"]


def read_run(run_dir: Path, estimator: str, seed: int, start_eval: tuple = ("", "")) -> list[dict]:
    """The run's per-iteration rows; ``start_eval`` (success, episodes) fills iteration 0 for runs that
    skipped it."""
    with open(run_dir / "train.csv") as f:
        train = list(csv.DictReader(f))
    evals = {0: start_eval} if start_eval != ("", "") else {}
    if (run_dir / "eval.csv").exists():
        with open(run_dir / "eval.csv") as f:
            evals.update({int(r["iteration"]): (r["eval_success"], r.get("eval_n", ""))
                          for r in csv.DictReader(f)})
    rows = []
    if 0 in evals:
        rows.append({"estimator": estimator, "seed": seed, "iteration": 0, "eval_success": evals[0][0],
                     "eval_n": evals[0][1]})
    for r in train:
        it = int(r["iteration"])
        row = {k: r.get(k, "") for k in CSV_FIELDS if k not in ("estimator", "seed")}
        row.update(estimator=estimator, seed=seed, iteration=it, eval_success=evals.get(it, ("", ""))[0],
                   eval_n=evals.get(it, ("", ""))[1])
        rows.append({k: "" if v == "nan" else v for k, v in row.items()})
    return rows


def _nanmean(values) -> float:
    values = np.asarray(values, dtype=float)
    return float(np.mean(values[~np.isnan(values)])) if (~np.isnan(values)).any() else float("nan")


def _num(rows, key):
    return np.array([float(r[key]) if r.get(key, "") not in ("", None) else np.nan for r in rows])


def curves(rows: list[dict], estimator: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(iterations, values[seed, iteration]) of one metric; NaN where a seed has no value."""
    mine = [r for r in rows if r["estimator"] == estimator and r.get(key, "") not in ("", None)]
    its = sorted({int(r["iteration"]) for r in mine})
    seeds = sorted({int(r["seed"]) for r in mine})
    grid = np.full((len(seeds), len(its)), np.nan)
    for r in mine:
        grid[seeds.index(int(r["seed"])), its.index(int(r["iteration"]))] = float(r[key])
    return np.array(its), grid


def plot(rows: list[dict], estimators: list[str], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    panels = [("success", "training success rate (%)", 100.0),
              ("eval_success", "held-out success rate (%)", 100.0),
              ("singleton_rate", "singleton rate (% of step rows)", 100.0)]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.3))
    colours = plt.get_cmap("tab10")
    for ax, (key, label, scale) in zip(axes, panels):
        for k, est in enumerate(estimators):
            its, grid = curves(rows, est, key)
            if not len(its):
                continue
            mean = np.nanmean(grid, axis=0) * scale
            n = grid.shape[0]
            # distinct dashes and markers keep overlapping curves (e.g. all at 0%) distinguishable
            ax.plot(its, mean, ls=STYLES[k % len(STYLES)], marker=MARKERS[k % len(MARKERS)], color=colours(k),
                    ms=4, label=f"{est} (mean of {n} seed{'s' * (n > 1)})")
            if n > 1:
                ax.fill_between(its, np.nanmin(grid, 0) * scale, np.nanmax(grid, 0) * scale, color=colours(k),
                                alpha=0.18, lw=0)
        ax.set_xlabel("RL iteration (one rollout batch + PPO update)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label)
        ax.set_ylim(*data_limits(ax, scale))
        ax.grid(alpha=0.3)
        if key == "singleton_rate" and not ax.lines:
            ax.text(0.5, 0.5, "no step groups (GRPO only)", ha="center", transform=ax.transAxes)
    axes[0].legend(loc="best", fontsize=8, title="line: mean, band: min-max over seeds", title_fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _ms(values, fmt="{:.1f}") -> str:
    """Mean over seeds ± the half-width of its 95% Student t interval (seeds vary the whole run)."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    if not len(values):
        return "n/a"
    if len(values) == 1:
        return fmt.format(values[0]) + " (1 seed)"
    half = t975(len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values))
    return (fmt + " ± " + fmt).format(values.mean(), half)


def _rate(p: float, n: float) -> str:
    """A success rate in % ± the half-width of its 95% interval over the n episodes it pools."""
    if np.isnan(p) or not n:
        return "n/a"
    return f"{100 * p:.1f} ± {100 * ci95(p, n):.1f} (n={int(n)})"


def _pooled(values, episodes) -> tuple[float, float]:
    values, episodes = np.asarray(values, float), np.asarray(episodes, float)
    ok = ~np.isnan(values) & ~np.isnan(episodes)
    n = episodes[ok].sum()
    return (float((values[ok] * episodes[ok]).sum() / n), float(n)) if n else (float("nan"), 0.0)


def summary_table(rows: list[dict], estimators: list[str], walls: dict, last: int, header: str,
                  episodes_per_iteration: int = 0) -> str:
    names = ["estimator", "seeds", f"train success % (last {last} it.)", "held-out success % (end)",
             "held-out success % (start)", "singleton rate %", "clusters / group", "mean group size",
             "estimator ms / it.", "rollout s / it.", "update s / it.", "wall s / run"]
    lines = [header, "", "| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for est in estimators:
        mine = [r for r in rows if r["estimator"] == est and r.get("success", "") != ""]
        seeds = sorted({int(r["seed"]) for r in mine})
        _, succ = curves(rows, est, "success")
        ev_its, ev = curves(rows, est, "eval_success")
        # success rates pool their episodes over seeds; other figures vary by seed (t interval)
        final = _pooled([_nanmean(s[-last:]) for s in succ],
                        [episodes_per_iteration * min(last, int((~np.isnan(s)).sum())) for s in succ])
        _, ev_n = curves(rows, est, "eval_n")
        ends = [(s[~np.isnan(s)][-1], n[~np.isnan(n)][-1]) for s, n in zip(ev, ev_n) if (~np.isnan(s)).any()]
        ev_end = _pooled([e[0] for e in ends], [e[1] for e in ends])
        has_start = len(ev_its) and ev_its[0] == 0
        ev_start = _pooled(ev[:, 0], ev_n[:, 0]) if has_start else (float("nan"), 0.0)

        def per_seed(key):
            return [_nanmean(_num([r for r in mine if int(r["seed"]) == s], key)) for s in seeds]

        lines.append("| " + " | ".join([
            est, str(len(seeds)), _rate(*final), _rate(*ev_end), _rate(*ev_start),
            _ms(np.array(per_seed("singleton_rate")) * 100), _ms(per_seed("clusters_per_group")),
            _ms(per_seed("mean_group_size"), "{:.2f}"),
            _ms(np.array(per_seed("estimator_s")) * 1000, "{:.2f}"), _ms(per_seed("rollout_s")),
            _ms(per_seed("update_s")), _ms([walls.get((est, s), np.nan) for s in seeds], "{:.0f}")]) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(rows, estimators, walls, out: Path, title: str, last: int,
                  episodes_per_iteration: int, accuracy: str = "") -> str:
    with open(out / "curves.csv", "w", newline="") as f:
        w = csv.DictWriter(f, CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    table = summary_table(rows, estimators, walls, last,
                          f"{title}. Success rates: pooled over seeds ± 95% CI half-width over their n "
                          "episodes; other figures: mean over seeds ± 95% t-interval half-width.",
                          episodes_per_iteration)
    if accuracy:
        table = ("## Advantage accuracy on the starting policy's rollouts (accuracy/)\n\n" + accuracy +
                 "\n## Short RL runs (at this size success rates seldom separate: read their intervals)\n\n"
                 + table)
    (out / "summary.md").write_text(table)
    plot(rows, estimators, out / "curves.png", title)
    return table
