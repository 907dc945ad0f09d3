"""The report of ``benchmarks/learning/env_table.py``: what a table folder holds, as Markdown, JSON and a
figure.

    python -m benchmarks.learning.env_table --out runs/alfworld_table --report

Per held-out set and policy (and over all sets pooled, for ALFWorld's two game sets): success with its 95%
Wilson interval, WebShop's mean score (95% t interval over episodes), the paired change episode by episode
(the same tasks, env seeds and decoding seeds: a difference's interval from the per-episode differences) of
the warm start from zero-shot and of each RL run from the warm start, per group of tasks (ALFWorld's task
types, WebShop's goal option counts), the share of answers the env refused, and minutes; the screen's
won training tasks per group. Per RL run: training success per iteration (the curve,
``curves.png``) and its first/last-window means, RL minutes.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from benchmarks.stats import mean_ci95
from benchmarks.learning.table_report import curve_ends, curve_window, success_curve


def wilson95(k: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of k successes in n trials (sound at 0 and n, unlike the normal one)."""
    if n <= 0:
        return (0.0, 1.0)
    z, p = 1.959963984540054, k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, mid - half), min(1.0, mid + half))


def rate(won) -> str:
    k, n = int(np.sum(won)), len(won)
    lo, hi = wilson95(k, n)
    return f"{100 * k / max(n, 1):.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] ({k}/{n})"


def paired_change(base: dict, other: dict, key: str = "won") -> tuple[float, float] | None:
    """Mean per-episode change of ``key`` from ``base`` to ``other`` and its 95% half-width; None when
    the two did not play the same episodes."""
    a, b = base["episodes"], other["episodes"]
    if a.get("tasks") != b.get("tasks"):
        return None
    return mean_ci95(np.asarray(b[key], dtype=float) - np.asarray(a[key], dtype=float))


POLICIES_FIRST = ("warm_start", "zero_shot")       # then one per RL run, named <estimator>_seed<seed>


def _read(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def load(out: Path, spec, runs: list) -> dict:
    """{held-out name: {policy: evaluation}} of what the folder holds, policies in table order."""
    policies = list(POLICIES_FIRST) + [f"{e}_seed{s}" for e, s in runs]
    return {h.name: {p: ev for p in policies
                     if (ev := _read(out / "evals" / f"{p}__{h.name}.json")) is not None}
            for h in spec.held_out}


def run_rows(out: Path, cfg, runs: list, window: int = 2) -> list[dict]:
    """Per RL run that has a train.csv: curve, first/last-window means, RL minutes, iterations done."""
    from benchmarks.learning.train_table import rl_seconds
    rows = []
    for est, seed in runs:
        run = out / f"{est}_seed{seed}"
        if not (run / "train.csv").exists():
            continue
        curve = success_curve(run)
        # one iteration has no first and last window to compare: None, which results.json keeps valid
        first, last = (curve_ends(curve, curve_window(len(curve), window)) if len(curve) >= 2
                       else (None, None))
        rows.append({"run": run.name, "curve": curve, "first": first, "last": last,
                     "rl_min": rl_seconds(run) / 60, "iterations": len(curve), "of": cfg.iterations,
                     "done": (run / "summary.json").exists()})
    return rows


def curve_cell(row: dict) -> str:
    """The RL-runs table's training cell: first -> last window, or what there is before two iterations."""
    if row["first"] is not None:
        return f"{100 * row['first']:.0f}% -> {100 * row['last']:.0f}%"
    if row["curve"]:
        return f"{100 * row['curve'][0]:.0f}% (one iteration so far)"
    return "- (no iteration yet)"


def pooled(evals: dict) -> dict:
    """{policy: evaluation} over every held-out set, for the policies scored on all of them: episodes
    concatenated in set order (task ids prefixed by the set, so pairing stays episode by episode)."""
    sets = list(evals.values())
    if len(sets) < 2:
        return {}
    out = {}
    for policy in sets[0]:
        if not all(policy in s for s in sets):
            continue
        evs = [(name, by_policy[policy]) for name, by_policy in evals.items()]
        n = [len(ev["episodes"]["won"]) for _, ev in evs]
        out[policy] = {
            "episodes": {"tasks": [f"{name}/{t}" for name, ev in evs for t in ev["episodes"]["tasks"]],
                         "won": [w for _, ev in evs for w in ev["episodes"]["won"]],
                         "scores": [x for _, ev in evs for x in ev["episodes"]["scores"]]},
            "eval_inadmissible": float(np.average([ev.get("eval_inadmissible", 0) for _, ev in evs],
                                                  weights=n)),
            "wall_s": sum(ev["wall_s"] for _, ev in evs)}
    return out


def paired_base(by_policy: dict, policy: str) -> tuple[str, dict] | tuple[None, None]:
    """Whom a policy's row is paired with: the warm start's with zero-shot's (did SFT help?), an RL run's
    with the warm start's (did RL help?)."""
    base = {"warm_start": "zero_shot", "zero_shot": None}.get(policy, "warm_start")
    return (base, by_policy[base]) if base in by_policy else (None, None)


def markdown(out: Path, spec, cfg, runs: list) -> tuple[str, dict]:
    evals = load(out, spec, runs)
    lines, data = [], {"held_out": {}, "runs": []}
    times = _read(out / "times.json") or {}
    lines.append(f"# {cfg.env} table ({cfg.preset_name or 'custom'}): {out}\n")
    if "warm_start_s" in times:
        lines.append(f"Warm start: {times['warm_start_s'] / 60:.1f} min.\n")
    lines.append("Paired change: the same episodes (tasks, env seeds, decoding seeds) played by both "
                 "policies; mean per-episode difference ± its 95% half-width. The warm start is paired with "
                 "zero-shot, each RL run with the warm start.\n")
    sections = list(evals.items())
    if spec.pool_held_out and (every := pooled(evals)):
        sections.append(("all held-out sets", every))
    for name, by_policy in sections:
        if not by_policy:
            continue
        head = "| policy | success [95% CI] |" + (" mean score [95% CI] |" if spec.report_score else "") + \
            " paired change | refused answers | minutes |"
        lines += [f"## Held out: {name}\n", head, "|" + "---|" * (head.count("|") - 1)]
        data["held_out"][name] = {}
        for policy, ev in by_policy.items():
            won = ev["episodes"]["won"]
            base_name, base = paired_base(by_policy, policy)
            change = paired_change(base, ev) if base is not None else None
            ch = (f"{100 * change[0]:+.1f} pp ± {100 * change[1]:.1f} vs {base_name.replace('_', ' ')}"
                  if change else "-")
            row = f"| {policy} | {rate(won)} |"
            if spec.report_score:
                m, h = mean_ci95(ev["episodes"]["scores"])
                row += f" {m:.3f} ± {h:.3f} |"
            row += f" {ch} | {100 * ev.get('eval_inadmissible', 0):.0f}% | {ev['wall_s'] / 60:.1f} |"
            lines.append(row)
            data["held_out"][name][policy] = {"success": float(np.mean(won)), "n": len(won),
                                              "wilson95": wilson95(int(np.sum(won)), len(won)),
                                              "score": mean_ci95(ev["episodes"]["scores"]),
                                              "paired_change": change, "paired_with": base_name,
                                              "minutes": ev["wall_s"] / 60}
        lines.append("")
        if spec.group_of is not None and name in evals:
            kwargs = {h.name: h for h in spec.held_out}[name].env_kwargs_under(cfg)
            try:
                lines += group_table(by_policy, lambda t: spec.group_of(t, kwargs), spec.group_label)
            except (FileNotFoundError, ValueError) as exc:     # the set's data is not where its kwargs say
                lines += [f"(no per-{spec.group_label} table for {name}: {exc})", ""]
    lines += screen_lines(out, spec, cfg)
    rows = run_rows(out, cfg, runs)
    if rows:
        lines += ["## RL runs\n",
                  "| run | iterations | training success, first -> last iterations | RL minutes |",
                  "|---|---|---|---|"]
        for r in rows:
            state = "" if r["done"] else " (running)"
            lines.append(f"| {r['run']} | {r['iterations']}/{r['of']}{state} | {curve_cell(r)} | "
                         f"{r['rl_min']:.1f} |")
        lines.append("")
        data["runs"] = rows
    return "\n".join(lines), data


def screen_lines(out: Path, spec, cfg) -> list[str]:
    """The screen's training tasks won at least once, in all and per group: RL trains only on those, so
    a group the screen never won is one RL never practises."""
    screen = _read(out / "screen.json")
    if screen is None:
        return []
    by_task = screen["by_task"]
    won = sum(1 for w, _ in by_task.values() if w > 0)
    lines = ["## Screen: the training tasks RL samples\n",
             f"The warm start won {won} of {len(by_task)} screened training tasks at least once "
             f"({screen['wall_s'] / 60:.1f} min).\n"]
    if spec.group_of is not None:
        kwargs = cfg.env_kwargs_dict()
        groups: dict[str, list] = {}
        try:
            for task, (w, _) in by_task.items():
                tally = groups.setdefault(spec.group_of(task, kwargs), [0, 0])
                tally[0], tally[1] = tally[0] + int(w > 0), tally[1] + 1
        except (FileNotFoundError, ValueError) as exc:
            return lines + [f"(no per-{spec.group_label} table for the screen: {exc})", ""]
        lines += [f"| {spec.group_label} | won at least once / screened |", "|---|---|"]
        lines += [f"| {g} | {w}/{n} |" for g, (w, n) in sorted(groups.items())] + [""]
    return lines


def group_table(by_policy: dict, group_of, label: str = "task type") -> list[str]:
    """Success per group of tasks (rows: ALFWorld's task types, WebShop's goal option counts) and policy
    (columns), each with its Wilson interval."""
    policies = list(by_policy)
    groups: dict[str, dict[str, list]] = {}
    for policy, ev in by_policy.items():
        for task, won in zip(ev["episodes"]["tasks"], ev["episodes"]["won"]):
            groups.setdefault(group_of(task), {}).setdefault(policy, []).append(won)
    lines = [f"| {label} | " + " | ".join(policies) + " |", "|---|" + "---|" * len(policies)]
    for g in sorted(groups):
        cells = [rate(groups[g][p]) if p in groups[g] else "-" for p in policies]
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    return lines + [""]


def plot(out: Path, cfg, runs: list) -> Path | None:
    rows = run_rows(out, cfg, runs)
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for r in rows:
        ax.plot(range(1, len(r["curve"]) + 1), np.asarray(r["curve"]) * 100, marker="o", label=r["run"])
    ax.set_xlabel("RL iteration")
    ax.set_ylabel("training success (%)")
    ax.set_title(f"{cfg.env}: success of each iteration's rollouts")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_report(out: Path, spec, cfg, runs: list) -> str:
    text, data = markdown(out, spec, cfg, runs)
    (out / "table.md").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps(data, indent=1, default=float))
    plot(out, cfg, runs)
    return text
