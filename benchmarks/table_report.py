"""The report of ``benchmarks/train_table.py``: its Markdown table and figure, from a table's folder.

    python benchmarks/train_table.py --out runs/table --report     # print and write them; trains nothing

Works on a finished table and on one still being filled: rows not run yet say so (a run stopped part-way
says how many iterations it has), so a table that spans sessions can be read at any point. Writes
``table.md`` and ``table.png`` in the table's folder.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np


def ci95(p: float, n: int) -> float:
    """Half-width of the normal-approximation 95% interval of a success rate over n episodes."""
    return 1.96 * math.sqrt(max(p * (1 - p), 0.0) / n) if n else float("nan")


def fmt(p: float, n: int) -> str:
    return f"{p:.3f} ± {ci95(p, n):.3f} (n={n})"


def diff_ci95(p1: float, n1: int, p2: float, n2: int) -> float:
    """Half-width of the 95% interval of p2 - p1 for independent samples. The table's rows play the same
    goals with the same seeds, so this is conservative: pairing only narrows it."""
    return 1.96 * math.sqrt(max(p1 * (1 - p1), 0.0) / n1 + max(p2 * (1 - p2), 0.0) / n2)


def success_curve(run_dir: Path) -> list[float]:
    """Training-goal success of each RL iteration of a run (empty before its first iteration)."""
    path = run_dir / "train.csv"
    if not path.exists():
        return []
    with open(path) as f:
        return [float(r["success"]) for r in csv.DictReader(f)]


def _read(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def t975(dof: int) -> float:
    """97.5% quantile of Student's t: tabled up to 10 degrees of freedom, above that a Cornish-Fisher
    expansion (within 0.003 of the exact value)."""
    from benchmarks.compare import T975
    if dof in T975:
        return T975[dof]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)


def goal_rates(by_task: dict) -> dict[str, float]:
    """Success rate of each goal from an evaluation's ``by_task`` ({goal: [won, episodes]})."""
    return {goal: won / episodes for goal, (won, episodes) in by_task.items()}


def goal_ci95(by_task: dict) -> float:
    """Half-width of the 95% t-interval of the mean over goals of their success rates. The episodes of
    one goal are far from independent (at T=0.4 a goal is mostly won 4 of 4 or 0 of 4 times), so this,
    not the interval over episodes, is the one that says how sure a figure is."""
    rates = np.array(list(goal_rates(by_task).values()))
    return float(t975(len(rates) - 1) * rates.std(ddof=1) / np.sqrt(len(rates))) if len(rates) > 1 else np.nan


def paired_change(before: dict, after: dict) -> tuple[float, float, int, int]:
    """Mean over goals of (after - before) success rate, the half-width of its 95% t-interval (the same
    goals with the same env and decoding seeds, so each goal is its own control), and how many goals
    rose and fell."""
    if set(before) != set(after):
        raise ValueError(f"the two evaluations played different goals ({len(before)} vs {len(after)}); "
                         "a paired change needs the same held-out goals")
    rb, ra = goal_rates(before), goal_rates(after)
    d = np.array([ra[g] - rb[g] for g in rb])
    half = float(t975(len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
    return float(d.mean()), half, int((d > 0).sum()), int((d < 0).sum())


def pooled_by_task(evals: list[dict]) -> dict:
    """Per-goal [won, episodes] summed over several evaluations of the same goals (runs of other seeds)."""
    out: dict[str, list] = {}
    for by_task in evals:
        for goal, (won, episodes) in by_task.items():
            tally = out.setdefault(goal, [0, 0])
            tally[0], tally[1] = tally[0] + won, tally[1] + episodes
    return out


def final_by_task(run_dir: Path):
    """The per-goal wins of a run's last evaluation (None when it predates per-goal tallies)."""
    path = run_dir / "eval_by_task.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return json.loads(lines[-1])["by_task"] if lines else None


def _policy_row(label: str, p: float, n: int, by_task, warm: dict, extra: list[str]) -> list[str]:
    """A table row: success with its intervals over episodes and over goals, and its change from the warm
    start (paired over goals when both have per-goal wins, else the unpaired interval over episodes)."""
    goals = f"± {goal_ci95(by_task):.3f} ({len(by_task)} goals)" if by_task else "n/a"
    if by_task and warm.get("by_task"):
        d, half, up, down = paired_change(warm["by_task"], by_task)
        change = f"{d:+.3f} ± {half:.3f} (paired; goals up {up}, down {down})"
    else:
        p0, n0 = warm["eval_success"], warm["eval_n"]
        change = f"{p - p0:+.3f} ± {diff_ci95(p0, n0, p, n):.3f} (unpaired)"
    return [label, fmt(p, n), goals, change] + extra


def markdown(out: Path, estimators: list[str], seeds: list[int], iterations: int, window: int) -> str:
    """The table: zero-shot, warm start, each estimator-seed run after RL and, with several seeds, each
    estimator pooled over its seeds; changes against the warm start with their 95% interval."""
    warm, zero = _read(out / "warm_start_eval.json"), _read(out / "zero_shot.json")
    if warm is None:
        return f"{out}: no warm-start evaluation yet (run benchmarks/train_table.py --out {out} first)"
    n = warm["eval_n"]
    sft_s = (_read(out / "warm_start_s.json") or {}).get("sft_s", float("nan"))
    results = {(r["estimator"], r["seed"]): r for r in (_read(out / "results.json") or [])}
    head = ["policy", "held-out success (95% CI over episodes)", "95% CI over goals", "change vs warm start",
            f"training goals, first -> last {window} it.", "minutes"]
    blank = ["", "", "", ""]
    rows = [["zero-shot", "not run yet"] + blank]
    if zero:
        rows[0] = _policy_row("zero-shot", zero["eval_success"], zero["eval_n"], zero.get("by_task"), warm,
                              ["", ""])
    warm_goals = f"± {goal_ci95(warm['by_task']):.3f} ({len(warm['by_task'])} goals)" if warm.get("by_task") \
        else "n/a"
    rows.append(["warm start", fmt(warm["eval_success"], n), warm_goals, "", "", f"{sft_s / 60:.1f} (SFT)"])
    for est in estimators:
        done = []
        for seed in seeds:
            r, run_dir = results.get((est, seed)), out / f"{est}_seed{seed}"
            if r is None:
                k = len(success_curve(run_dir))
                state = ("RL done, held-out evaluation not run yet" if k >= iterations else
                         f"stopped after {k} of {iterations} iterations" if k else "not run yet")
                rows.append([f"{est} seed {seed}", state] + blank)
                continue
            done.append((r, final_by_task(run_dir)))
            rows.append(_policy_row(f"{est} seed {seed}", r["eval_after"], n, done[-1][1], warm,
                                    [f"{r['train_first']:.3f} -> {r['train_last']:.3f}",
                                     f"{r['rl_s'] / 60:.1f} (RL)"]))
        if len(done) > 1:
            by_tasks = [b for _, b in done]
            pooled = pooled_by_task(by_tasks) if all(by_tasks) else None
            first = float(np.mean([r["train_first"] for r, _ in done]))
            last = float(np.mean([r["train_last"] for r, _ in done]))
            rows.append(_policy_row(f"**{est}, {len(done)} seeds pooled**",
                                    float(np.mean([r["eval_after"] for r, _ in done])), n * len(done), pooled,
                                    warm, [f"{first:.3f} -> {last:.3f}", ""]))
    lines = [f"Held-out success on TextCraft ({n} episodes per run: the same goals, env seeds and decoding "
             "seeds for every row). The episodes of one goal are correlated, so the interval over goals (a "
             "t-interval of the per-goal success rates) is the honest one; the interval over episodes is the "
             "normal approximation. Change: RL minus warm start, with the 95% t-interval of the per-goal "
             "differences (paired), or the unpaired interval over episodes where an evaluation has no "
             "per-goal wins. A pooled row counts the per-goal wins of its seeds together; its interval does "
             "not include the spread between seeds.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def plot(out: Path, estimators: list[str], seeds: list[int], path: Path) -> bool:
    """Three panels: training-goal success per iteration of every run (colour: estimator, line style:
    seed); held-out success of every policy with its 95% interval; each run's paired change from the warm
    start with its interval (where per-goal wins exist). False when there is nothing to draw yet."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from benchmarks.compare import MARKERS, STYLES, _data_limits
    warm, zero = _read(out / "warm_start_eval.json"), _read(out / "zero_shot.json")
    if warm is None:
        return False
    n = warm["eval_n"]
    results = {(r["estimator"], r["seed"]): r for r in (_read(out / "results.json") or [])}
    colours = plt.get_cmap("tab10")
    fig, (left, right, change) = plt.subplots(1, 3, figsize=(16, 4.5),
                                              gridspec_kw={"width_ratios": [3, 2, 2]})

    def half_width(p, m, by_task):     # over goals where the evaluation kept per-goal wins
        return goal_ci95(by_task) if by_task else ci95(p, m)

    labels, points, changes = [], [], []
    if zero:
        pz = zero["eval_success"]
        labels.append("zero-shot")
        points.append((pz, half_width(pz, zero["eval_n"], zero.get("by_task")), "grey", "x"))
    labels.append("warm start")
    p0 = warm["eval_success"]
    points.append((p0, half_width(p0, n, warm.get("by_task")), "black", "o"))
    for k, est in enumerate(estimators):
        for j, seed in enumerate(seeds):
            curve = success_curve(out / f"{est}_seed{seed}")
            if curve:
                left.plot(range(1, len(curve) + 1), np.array(curve) * 100, color=colours(k),
                          ls=STYLES[j % len(STYLES)], marker=MARKERS[k % len(MARKERS)], ms=4,
                          label=f"{est} seed {seed}")
            if (est, seed) in results:
                labels.append(f"{est} s{seed}")
                p, by_task = results[(est, seed)]["eval_after"], final_by_task(out / f"{est}_seed{seed}")
                points.append((p, half_width(p, n, by_task), colours(k), MARKERS[k % len(MARKERS)]))
                if by_task and warm.get("by_task"):
                    d, half, _, _ = paired_change(warm["by_task"], by_task)
                    changes.append((labels[-1], d, half, colours(k), MARKERS[k % len(MARKERS)]))
    for x, (p, half, colour, marker) in enumerate(points):
        right.errorbar([x], [p * 100], yerr=[half * 100], color=colour, marker=marker, capsize=4, ms=6)
    right.axhline(warm["eval_success"] * 100, color="black", lw=0.8, ls=":")
    right.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    right.set_xlim(-0.6, len(labels) - 0.4)
    right.set_ylabel(f"held-out success % ({n} episodes;\n95% CI over goals, else over episodes)")
    right.set_ylim(*_data_limits(right, 100.0))
    for x, (_, d, half, colour, marker) in enumerate(changes):
        change.errorbar([x], [d * 100], yerr=[half * 100], color=colour, marker=marker, capsize=4, ms=6)
    change.axhline(0, color="black", lw=0.8, ls=":")
    change.set_xticks(range(len(changes)), [c[0] for c in changes], rotation=30, ha="right", fontsize=8)
    change.set_xlim(-0.6, max(len(changes), 1) - 0.4)
    change.set_ylabel("change from the warm start, points\n(95% CI, paired over goals)")
    if not changes:
        change.text(0.5, 0.5, "no paired change yet\n(needs per-goal wins)", ha="center",
                    transform=change.transAxes)
    left.set_xlabel("RL iteration")
    left.set_ylabel("training-goal success % (that iteration's episodes)")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    if left.lines:
        left.set_ylim(*_data_limits(left, 100.0))
        left.legend(fontsize=8, ncol=2)
    else:
        left.text(0.5, 0.5, "no RL iteration yet", ha="center", transform=left.transAxes)
    for ax in (left, right, change):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_report(out: Path, estimators: list[str], seeds: list[int], iterations: int, window: int) -> str:
    """Writes ``table.md`` and ``table.png`` in ``out`` and returns the Markdown."""
    text = markdown(out, estimators, seeds, iterations, window)
    if not (out / "warm_start_eval.json").exists():
        return text
    (out / "table.md").write_text(text + "\n")
    if plot(out, estimators, seeds, out / "table.png"):
        text += f"\n\nfigure: {out / 'table.png'}"
    return text
