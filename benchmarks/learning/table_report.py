"""The report of ``benchmarks/learning/train_table.py``: its Markdown table and figure, from a table's folder.

    # print and write them; trains nothing
    python -m benchmarks.learning.train_table --out runs/table --report

Works on a finished table and on one still being filled: rows not run yet say so (a run stopped part-way
says how many iterations it has), so a table that spans sessions can be read at any point. Writes
``table.md`` and ``table.png`` in the table's folder.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.stats import ci95, t975


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


def curve_window(iterations: int, window: int) -> int:
    """The iterations averaged at each end of a training curve: ``window``, but at most half the run, so
    the first and last means never share an iteration (a 6-iteration run compares its first and last 3)."""
    return max(1, min(window, iterations // 2))


def curve_ends(success: list[float], window: int) -> tuple[float, float]:
    """Mean training-goal success of the first and of the last ``window`` iterations (nan for no curve)."""
    if not success:
        return math.nan, math.nan
    return float(np.mean(success[:window])), float(np.mean(success[-window:]))


def _read(path: Path):
    return json.loads(path.read_text()) if path.exists() else None


def goal_rates(by_task: dict) -> dict[str, float]:
    """Success rate of each goal from an evaluation's ``by_task`` ({goal: [won, episodes]})."""
    return {goal: won / episodes for goal, (won, episodes) in by_task.items()}


def goal_ci95(by_task: dict) -> float:
    """Half-width of the 95% t-interval of the mean over goals of their success rates. The episodes of
    one goal are far from independent (at T=0.4 a goal is mostly won 4 of 4 or 0 of 4 times), so this,
    not the interval over episodes, is the one that says how sure a figure is."""
    rates = np.array(list(goal_rates(by_task).values()))
    return float(t975(len(rates) - 1) * rates.std(ddof=1) / np.sqrt(len(rates))) if len(rates) > 1 else np.nan


def won_of(by_task: dict) -> tuple[int, int]:
    """Wins and episodes of an evaluation's ``by_task`` ({goal: [won, episodes]}) over all its goals."""
    return sum(w for w, _ in by_task.values()), sum(e for _, e in by_task.values())


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


@dataclass
class Policy:
    """One evaluated policy of a table: zero-shot, the warm start, a run after RL, or an estimator's runs
    pooled over seeds."""
    label: str
    success: float
    episodes: int
    by_task: dict | None            # {goal: [won, episodes]}; None where the evaluation predates it
    estimator: str = ""             # "" for zero-shot and the warm start
    seed: int | None = None         # None for zero-shot, the warm start and pooled rows
    train_first: float = math.nan   # training-goal success over the first / last iterations of RL
    train_last: float = math.nan
    minutes: str = ""
    change: tuple | None = None     # vs the warm start: (diff, half-width, goals up, goals down, paired)


@dataclass
class Table:
    """What a table's folder holds, read once: the rows in display order (a run not finished is a
    (label, state) pair) and each run's training curve."""
    warm: Policy
    zero: Policy | None
    rows: list = field(default_factory=list)
    screen: dict | None = None                       # {training goal: [won, episodes]}; won > 0: RL drew it
    trained_on: str = "the training goals the warm start won in the screen"
    curves: dict = field(default_factory=dict)       # (estimator, seed) -> success per iteration
    window: int = 5                                  # iterations averaged at each end of a curve


def change_from(warm: Policy, p: Policy) -> tuple:
    """p's change from the warm start: paired over goals when both have per-goal wins, else the unpaired
    interval over episodes (goals up/down unknown)."""
    if p.by_task and warm.by_task:
        return (*paired_change(warm.by_task, p.by_task), True)
    return (p.success - warm.success, diff_ci95(warm.success, warm.episodes, p.success, p.episodes),
            None, None, False)


def load_table(out: Path, estimators: list[str], seeds: list[int], iterations: int, window: int = 5):
    """The table in ``out`` (None before its warm start has been evaluated); each run's training curve is
    summarised by its first and last ``curve_window(iterations, window)`` iterations."""
    warm_eval, zero = _read(out / "warm_start_eval.json"), _read(out / "zero_shot.json")
    if warm_eval is None:
        return None
    n = warm_eval["eval_n"]
    sft_s = (_read(out / "warm_start_s.json") or {}).get("sft_s", float("nan"))
    warm = Policy("warm start", warm_eval["eval_success"], n, warm_eval.get("by_task"),
                  minutes=f"{sft_s / 60:.1f} (SFT)")
    table = Table(warm, None, screen=(_read(out / "screen.json") or {}).get("by_task"),
                  window=curve_window(iterations, window))
    settings = _read(out / "table_settings.json") or {}
    settings = settings.get("table", settings)      # today's form keeps the table's options under "table"
    chosen, minimum = settings.get("train_goals"), settings.get("min_ingredients", 1)
    simpler = settings.get("also_simpler", 0)
    if chosen:     # --train-goals replaced the screen: mark those goals among the screened (or alone)
        table.screen = {g: [int(g in chosen), 1] for g in table.screen or chosen}
        table.trained_on = "the goals of --train-goals"
    elif table.screen and minimum > 1:
        from agents.goal_screen import screen_choice
        chosen = screen_choice(table.screen, minimum, simpler)
        table.screen = {g: [int(g in chosen), 1] for g in table.screen}
        table.trained_on = f"the training goals of {minimum}+ ingredients the warm start won in the screen" \
            + (f", and {simpler} of fewer" if simpler else "")
    if zero:
        table.zero = Policy("zero-shot", zero["eval_success"], zero["eval_n"], zero.get("by_task"))
        table.zero.change = change_from(warm, table.zero)
    results = {(r["estimator"], r["seed"]): r for r in (_read(out / "results.json") or [])}
    for est in estimators:
        done = []
        for seed in seeds:
            run_dir = out / f"{est}_seed{seed}"
            table.curves[(est, seed)] = success_curve(run_dir)
            r = results.get((est, seed))
            if r is None:
                k = len(table.curves[(est, seed)])
                table.rows.append((f"{est} seed {seed}", "RL done, held-out evaluation not run yet"
                                   if k >= iterations else f"stopped after {k} of {iterations} iterations"
                                   if k else "not run yet"))
                continue
            # the curve's ends are read from train.csv with this report's window, not the run's
            first, last = curve_ends(table.curves[(est, seed)], table.window)
            done.append(Policy(f"{est} seed {seed}", r["eval_after"], n, final_by_task(run_dir), est, seed,
                               first, last, f"{r['rl_s'] / 60:.1f} (RL)"))
            done[-1].change = change_from(warm, done[-1])
            table.rows.append(done[-1])
        if len(done) > 1:
            by_tasks = [p.by_task for p in done]
            pooled = Policy(f"**{est}, {len(done)} seeds pooled**", float(np.mean([p.success for p in done])),
                            n * len(done), pooled_by_task(by_tasks) if all(by_tasks) else None, est,
                            train_first=float(np.mean([p.train_first for p in done])),
                            train_last=float(np.mean([p.train_last for p in done])))
            pooled.change = change_from(warm, pooled)
            table.rows.append(pooled)
    return table


def _goals_ci(p: Policy) -> str:
    return f"± {goal_ci95(p.by_task):.3f} ({len(p.by_task)} goals)" if p.by_task else "n/a"


def _change_text(change) -> str:
    d, half, up, down, paired = change
    return (f"{d:+.3f} ± {half:.3f} (paired; goals up {up}, down {down})" if paired
            else f"{d:+.3f} ± {half:.3f} (unpaired)")


def split_by_depth(by_task: dict, depths: dict) -> dict:
    """by_task split into {depth: by_task of the goals of that depth}; goals of unknown depth under "?"."""
    groups: dict = {}
    for goal, tally in by_task.items():
        groups.setdefault(depths.get(goal, "?"), {})[goal] = tally
    return dict(sorted(groups.items(), key=lambda kv: str(kv[0])))


def depth_changes(warm_by_task: dict, by_task: dict, depths: dict) -> dict:
    """{depth: (won, episodes, paired change, its half-width)} of an evaluation, the change taken over the
    goals of that depth against the warm start (None where the two did not play the same goals)."""
    warm_split, split, out = split_by_depth(warm_by_task, depths), split_by_depth(by_task, depths), {}
    for d, warm_goals in warm_split.items():
        mine = split.get(d, {})
        won, eps = won_of(mine)
        change = paired_change(warm_goals, mine)[:2] if set(mine) == set(warm_goals) else (None, None)
        out[d] = (won, eps, *change)
    return out


# how a split's groups are named: (what the title calls a goal's group, a group's column name)
SPLITS = {"depth": ("goal depth", "depth {}"), "shape": ("recipe shape", "{} ingredient(s)")}


def split_markdown(table: Table, groups: dict, kind: str = "depth") -> str:
    """Held-out success of each policy by goal group (``groups``: {goal: depth} with ``kind`` "depth",
    {goal: ingredients} with "shape"), with the paired change from the warm start among the goals of that
    group: where RL gained and where nothing moved."""
    if not table.warm.by_task:
        return ""
    title, column = SPLITS[kind]
    warm_split = split_by_depth(table.warm.by_task, groups)
    policies = [table.zero] * (table.zero is not None) + [table.warm] + [
        p for p in table.rows if isinstance(p, Policy) and p.seed is not None]
    head = ["policy"] + [f"{column.format(d)} ({len(g)} goals)" for d, g in warm_split.items()]
    lines = [f"Held-out success by {title}: won/episodes, and the change from the warm start paired over "
             "that group's goals (95% t-interval).", "", "| " + " | ".join(head) + " |",
             "|" + "---|" * len(head)]
    for p in policies:
        if not p.by_task:
            lines.append(f"| {p.label} | " + " | ".join("n/a" for _ in warm_split) + " |")
            continue
        cells = []
        for won, eps, diff, half in depth_changes(table.warm.by_task, p.by_task, groups).values():
            cell = f"{won / eps:.3f} ({won}/{eps})" if eps else "n/a"
            cells.append(cell + (f", {diff:+.3f} ± {half:.3f}" if p is not table.warm and diff is not None
                                 else ""))
        lines.append(f"| {p.label} | " + " | ".join(cells) + " |")
    if table.screen:
        # RL can only have learned the groups it practised: say which those were
        won = split_by_depth({g: t for g, t in table.screen.items() if t[0] > 0}, groups)
        played = split_by_depth(table.screen, groups)
        lines += ["", f"RL trained on {table.trained_on}: " + ", ".join(
            f"{len(won.get(d, {}))} of {len(goals)} of {column.format(d)}" for d, goals in played.items())
            + "."]
    return "\n".join(lines)


def markdown(table: Table, depths: dict | None = None, shapes: dict | None = None) -> str:
    """The table: zero-shot, warm start, each estimator-seed run after RL and, with several seeds, each
    estimator pooled over its seeds; changes against the warm start with their 95% interval. With
    ``depths`` ({goal: depth}), a second table splits held-out success by goal depth; with ``shapes``
    ({goal: ingredients of its simplest recipe}), a third by recipe shape."""
    head = ["policy", "held-out success (95% CI over episodes)", "95% CI over goals", "change vs warm start",
            f"training goals, first -> last {table.window} it.", "minutes"]
    rows = [] if table.zero else [["zero-shot", "not run yet", "", "", "", ""]]
    for p in [table.zero] * (table.zero is not None) + [table.warm] + table.rows:
        if isinstance(p, tuple):
            rows.append([p[0], p[1], "", "", "", ""])
            continue
        training = f"{p.train_first:.3f} -> {p.train_last:.3f}" if p.estimator else ""
        rows.append([p.label, fmt(p.success, p.episodes), _goals_ci(p),
                     _change_text(p.change) if p.change else "", training, p.minutes])
    n = table.warm.episodes
    lines = [f"Held-out success on TextCraft ({n} episodes per run: the same goals, env seeds and decoding "
             "seeds for every row). The episodes of one goal are correlated, so the interval over goals (a "
             "t-interval of the per-goal success rates) is the honest one; the interval over episodes is the "
             "normal approximation. Change: RL minus warm start, with the 95% t-interval of the per-goal "
             "differences (paired), or the unpaired interval over episodes where an evaluation has no "
             "per-goal wins. A pooled row counts the per-goal wins of its seeds together; its interval does "
             "not include the spread between seeds.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    splits = [split_markdown(table, groups, kind) for kind, groups in (("depth", depths), ("shape", shapes))
              if groups]
    return "\n\n".join(["\n".join(lines)] + [text for text in splits if text])


def plot(table: Table, estimators: list[str], seeds: list[int], path: Path,
         depths: dict | None = None) -> None:
    """Three panels: training-goal success per iteration of every run (colour: estimator, line style:
    seed); held-out success of every policy with its 95% interval; each run's paired change from the warm
    start with its interval (where per-goal wins exist), over all goals and, with ``depths``, over the
    goals of each depth."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from benchmarks.plotting import MARKERS, STYLES, data_limits
    colours = plt.get_cmap("tab10")
    fig, (left, right, change) = plt.subplots(1, 3, figsize=(16, 4.5),
                                              gridspec_kw={"width_ratios": [3, 2, 2]})
    for k, est in enumerate(estimators):
        for j, seed in enumerate(seeds):
            curve = table.curves.get((est, seed))
            if curve:
                left.plot(range(1, len(curve) + 1), np.array(curve) * 100, color=colours(k),
                          ls=STYLES[j % len(STYLES)], marker=MARKERS[k % len(MARKERS)], ms=4,
                          label=f"{est} seed {seed}")
    runs = [p for p in table.rows if isinstance(p, Policy) and p.seed is not None]
    style = {"zero-shot": ("grey", "x"), "warm start": ("black", "o")}
    for est in estimators:
        k = estimators.index(est)
        style[est] = (colours(k), MARKERS[k % len(MARKERS)])
    points = [table.zero] * (table.zero is not None) + [table.warm] + runs
    labels = [p.label if p.seed is None else f"{p.estimator} s{p.seed}" for p in points]
    for x, p in enumerate(points):
        colour, marker = style[p.estimator or p.label]
        # over goals where the evaluation kept per-goal wins, else over episodes
        half = goal_ci95(p.by_task) if p.by_task else ci95(p.success, p.episodes)
        right.errorbar([x], [p.success * 100], yerr=[half * 100], color=colour, marker=marker, capsize=4,
                       ms=6)
    right.axhline(table.warm.success * 100, color="black", lw=0.8, ls=":")
    right.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=8)
    right.set_xlim(-0.6, len(labels) - 0.4)
    right.set_ylabel(f"held-out success % ({table.warm.episodes} episodes;\n95% CI over goals, else "
                     "over episodes)")
    right.set_ylim(*data_limits(right, 100.0))
    paired = [p for p in runs if p.change and p.change[4]]
    fills = ["none", "bottom", "top", "left", "right"]       # one fill per goal depth; filled = all goals
    depth_names = list(split_by_depth(table.warm.by_task, depths)) if depths and paired else []
    width = 0.7 / (1 + len(depth_names))
    for x, p in enumerate(paired):
        colour, marker = style[p.estimator]
        marks = [(p.change[0], p.change[1], "full")]
        by_depth = depth_changes(table.warm.by_task, p.by_task, depths) if depth_names else {}
        marks += [(by_depth[d][2], by_depth[d][3], fills[k % len(fills)]) for k, d in enumerate(depth_names)
                  if by_depth[d][2] is not None]
        for k, (diff, half, fill) in enumerate(marks):
            xk = x + (k - (len(marks) - 1) / 2) * width
            change.errorbar([xk], [diff * 100], yerr=[0 if np.isnan(half) else half * 100], color=colour,
                            marker=marker, fillstyle=fill, capsize=3, ms=6)
    if depth_names:
        keys = [("full", "all goals")] + [(fills[k % len(fills)], f"depth {d} goals")
                                          for k, d in enumerate(depth_names)]
        change.legend(handles=[plt.Line2D([], [], color="black", marker="o", ls="", fillstyle=f, label=text)
                               for f, text in keys], fontsize=8)
    change.axhline(0, color="black", lw=0.8, ls=":")
    change.set_xticks(range(len(paired)), [f"{p.estimator} s{p.seed}" for p in paired], rotation=30,
                      ha="right", fontsize=8)
    change.set_xlim(-0.6, max(len(paired), 1) - 0.4)
    change.set_ylabel("change from the warm start, points\n(95% CI, paired over goals)")
    if not paired:
        change.text(0.5, 0.5, "no paired change yet\n(needs per-goal wins)", ha="center",
                    transform=change.transAxes)
    left.set_xlabel("RL iteration")
    left.set_ylabel("training-goal success % (that iteration's episodes)")
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    if left.lines:
        left.set_ylim(*data_limits(left, 100.0))
        left.legend(fontsize=8, ncol=2)
    else:
        left.text(0.5, 0.5, "no RL iteration yet", ha="center", transform=left.transAxes)
    for ax in (left, right, change):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(out: Path, estimators: list[str], seeds: list[int], iterations: int, window: int,
                 depths: dict | None = None, shapes: dict | None = None) -> str:
    """Writes ``table.md`` and ``table.png`` in ``out`` and returns the Markdown. ``depths`` ({goal:
    depth}) and ``shapes`` ({goal: ingredients}; both by default from TextCraft's recipe book) add the
    splits by goal depth and by recipe shape."""
    table = load_table(out, estimators, seeds, iterations, window)
    if table is None:
        return (f"{out}: no warm-start evaluation yet "
                f"(run python -m benchmarks.learning.train_table --out {out} first)")
    from bipace_envs.textcraft.goals import goal_depths, goal_ingredients
    depths = goal_depths() if depths is None else depths
    shapes = goal_ingredients() if shapes is None else shapes
    text = markdown(table, depths, shapes)
    (out / "table.md").write_text(text + "\n")
    plot(table, estimators, seeds, out / "table.png", depths)
    return text + f"\n\nfigure: {out / 'table.png'}"
