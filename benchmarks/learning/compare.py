"""``bipace-compare``: which estimator assigns credit best on a real policy, then learning curves of
several estimators x seeds on one env, with the trainer.

    bipace-compare                                      # preset "compare": the accuracy stage on SmolLM2
    bipace-compare --train                              # then short RL runs of its estimators
    bipace-compare --preset tiny                        # the 1M-parameter model (fast, does not generalise)
    bipace-compare --estimators grpo gigpo bipace --seeds 0 1 2 --set iterations=20 --out runs/compare
    bipace-compare --preset qwen1.5b-alfworld --seeds 0 1 2          # the paper's setting on one GPU
    bipace-compare --set lr=1e-3 --set env_kwargs='{"preset": "agentgym", "depths": [1, 2]}'
    bipace-compare --set vector_mode=ray --set ray_address=auto     # envs in a Ray cluster's actors
    python -m benchmarks.learning.compare ...                    # the same, from a checkout

Settings: a preset of ``agents/presets.py`` (``--preset``) plus ``--set FIELD=VALUE`` for any
``agents.config.TrainConfig`` field; the preset also names the default estimators and seeds. First (when the
preset has an SFT warm start, built once in ``<out>/shared/warm_start``) the advantage accuracy of every
estimator on the warm start's own rollouts (``benchmarks/credit/advantage_accuracy.py``, sized by its
``SIZES[preset]``; ``--no-accuracy`` skips it): the estimators' advantages against Monte-Carlo advantages on
the same rows, with paired 95% intervals over goals, and their step-group statistics. At this size that is
what separates estimators; a few RL iterations of a 135M model do not (their success rates differ by less than
their intervals), so a preset with an accuracy size stops there unless ``--train``. With ``--train`` (the
default for presets without an accuracy size) the RL runs follow, sequential in this process (one heavy job at
a time), each an ``agents.trainer.Trainer`` with the preset's config plus your overrides, in
``<out>/runs/<estimator>_seed<k>/``, all from the same warm start. A finished run (same config,
``summary.json`` present) is reused; ``--fresh`` reruns it; the accuracy stage continues from what
``<out>/accuracy`` holds.

Outputs in ``--out``:
- ``accuracy/``: the accuracy stage's summary.md, scores.csv, pairs.csv, rows.csv and accuracy.png.
- ``curves.csv`` (with the RL runs): one row per (estimator, seed, iteration): training success rate, score
  (mean mapped episode return, 10 per win), singleton rate, clusters per group, mean group size (the
  estimator's step groups; blank for GRPO), estimator/rollout/update seconds, rows, and held-out eval success
  at the iterations where the trainer evaluated (iteration 0 = before training).
- ``curves.png``: success vs iteration (mean and min-max band over seeds), eval success, singleton rate.
- ``summary.md``: the accuracy table and which paired differences are beyond their intervals (or "not
  separated at this size" and the full benchmark's command), then, with the RL runs, final training and
  held-out success (pooled over seeds, with the 95% CI over their episodes) and time per iteration split into
  parts (mean over seeds with a 95% t-interval).
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.plotting import MARKERS, STYLES, data_limits
from benchmarks.stats import ci95, t975

# where the real answers are, for a first-time user of the short default
FULL_ACCURACY = ("python -m benchmarks.credit.advantage_accuracy --out runs/aa --ingredients 2+ "
                 "(docs/advantage-accuracy.md)")
FULL_LEARNING = "python -m benchmarks.learning.train_table --out runs/table (docs/experiments.md)"

CSV_FIELDS = ["estimator", "seed", "iteration", "success", "score", "singleton_rate", "clusters_per_group",
              "mean_group_size", "estimator_s", "rollout_s", "update_s", "rows", "eval_success", "eval_n"]


def make_trainer_class():
    """The trainer with its step groups measured on every iteration (outside the estimator's timer)."""
    from agents.trainer import Trainer
    from benchmarks.credit.group_stats import group_stats, step_groups

    class InstrumentedTrainer(Trainer):
        def batch_metrics(self, ro, adv):
            c = self.cfg
            codes = step_groups(ro.batch, c.estimator, gamma=c.gamma, mode=self.mode, eps=c.resolved_eps(),
                                pace=c.pace,
                                **c.estimator_options_dict())
            return dict(group_stats(ro.batch, codes), score=float(ro.episode_return.mean()))

    return InstrumentedTrainer


def shared_warm_start(base, out: Path) -> Path | None:
    """The preset's SFT warm start, built once in ``<out>/shared/warm_start`` (a Trainer builds it as its
    own); every run and the accuracy stage start from it. None without SFT."""
    if base.sft_steps <= 0:
        return None
    shared = out / "shared"
    warm = shared / "warm_start"
    if not (warm / "config.json").exists():
        from agents.trainer import Trainer
        Trainer(dataclasses.replace(base, out_dir=str(shared)))
    return warm


def accuracy_stage(name: str, sets: list, policy: str, out: Path) -> str:
    """``benchmarks.credit.advantage_accuracy`` on ``policy`` with the preset's settings and size; its
    summary, or why it could not say anything (a policy that never wins)."""
    from benchmarks.credit import advantage_accuracy as aa
    argv = ["--out", str(out), "--preset", name, "--policy", policy, "--resume"]   # a rerun continues it
    for item in sets:
        argv += ["--set", item]
    try:
        res = aa.run(aa.build_parser().parse_args(argv))
    except SystemExit as exc:          # no wins: every advantage is zero, said in one line
        (out / "summary.md").write_text(f"Advantage accuracy: not measured. {exc}\n")
        return (out / "summary.md").read_text()
    if not any(r["beyond_interval"] for r in res["results"].pairs if r["metric"] == "pearson"):
        with open(out / "summary.md", "a") as f:
            f.write(f"\nNot separated at this size ({res['results'].n_goals} goals): no paired difference "
                    "in Pearson r is beyond its interval. The full benchmark on more goals: "
                    + FULL_ACCURACY + "\n")
    return (out / "summary.md").read_text()


def run_one(cfg, warm_start: Path | None, fresh: bool) -> Path:
    """Train one (estimator, seed); reuse it when a finished run with the same config is on disk."""
    out = Path(cfg.out_dir)
    done = out / "summary.json"
    if not fresh and done.exists() and (out / "config.json").exists():
        # runs made before presets have no preset_name: the settings decide, not the name
        stored = json.loads((out / "config.json").read_text())
        stored.pop("preset_name", None)
        if stored == {k: v for k, v in dataclasses.asdict(cfg).items() if k != "preset_name"}:
            print(f"reusing finished run {out}")
            return out
    if out.exists():
        shutil.rmtree(out)
    if warm_start is not None and (warm_start / "config.json").exists():
        shutil.copytree(warm_start, out / "warm_start")        # the trainer loads it instead of redoing SFT
    make_trainer_class()(cfg).train()
    return out


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


def build_parser() -> argparse.ArgumentParser:
    from agents.presets import describe
    p = argparse.ArgumentParser(prog="bipace-compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--preset", default="compare",
                   help="the TrainConfig every run starts from (agents/presets.py):\n" + describe())
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any agents.config.TrainConfig field (repeatable), e.g. --set iterations=8")
    p.add_argument("--estimators", nargs="+", help="estimators to compare (default: the preset's)")
    p.add_argument("--seeds", nargs="+", type=int, help="training seeds (default: the preset's)")
    p.add_argument("--out", default="runs/compare", help="output folder")
    p.add_argument("--last", type=int, default=3, help="iterations averaged for the final training success")
    p.add_argument("--fresh", action="store_true", help="rerun finished runs instead of reusing them")
    p.add_argument("--no-accuracy", action="store_true",
                   help="skip the advantage-accuracy stage (it runs for presets with a size in "
                        "benchmarks.credit.advantage_accuracy.SIZES)")
    p.add_argument("--train", action=argparse.BooleanOptionalAction, default=None,
                   help="run the short RL runs after the accuracy stage (default: only for presets without "
                        "an accuracy size; a few iterations of a 135M model do not separate estimators, the "
                        "TextCraft table does: " + FULL_LEARNING + ")")
    return p


def main(argv=None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = build_parser().parse_args(argv)
    from agents.presets import PRESETS, get_preset, resolve_name
    from estimators import available_estimators
    from tqdm.auto import tqdm
    try:
        name = resolve_name(args.preset)
        base = get_preset(name, args.set)
    except ValueError as exc:
        print(f"bipace-compare: error: {exc}", file=sys.stderr)
        return 2
    estimators = args.estimators or list(PRESETS[name].estimators)
    seeds = args.seeds if args.seeds is not None else list(PRESETS[name].seeds)
    unknown = [e for e in estimators if e not in available_estimators()]
    if unknown:
        print(f"bipace-compare: error: unknown estimator(s) {unknown}; available: {available_estimators()}",
              file=sys.stderr)
        return 2
    try:
        import matplotlib  # noqa: F401  (fail before hours of training, not after)
    except ImportError:
        print("bipace-compare: error: the learning-curve plot needs matplotlib: pip install 'bipace[bench]'",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    title = (f"{base.env} / {base.model} / preset {name}: {base.iterations} iterations x "
             f"{base.batch_tasks} tasks x G={base.group_size}")
    from benchmarks.credit.advantage_accuracy import SIZES
    warm = shared_warm_start(base, out)
    accuracy = ""
    if not args.no_accuracy and name in SIZES:
        accuracy = accuracy_stage(name, args.set, str(warm or base.model), out / "accuracy")
        print(accuracy, flush=True)
    elif not args.no_accuracy:
        print(f"advantage accuracy: preset {name!r} has no size in "
              "benchmarks.credit.advantage_accuracy.SIZES; skipped (run "
              "python -m benchmarks.credit.advantage_accuracy --preset ... --tasks ... to size one)")
    train = args.train if args.train is not None else not (accuracy and name in SIZES)
    if not train:
        (out / "summary.md").write_text(
            "## Advantage accuracy on the starting policy's rollouts (accuracy/)\n\n" + accuracy
            + "\nNo RL runs (--train runs them). Whether an estimator helps a policy learn: " + FULL_LEARNING
            + "\n")
        print(f"no RL runs (--train runs them); learning: {FULL_LEARNING}\nwrote {out / 'summary.md'}")
        return 0
    rows, walls, start_eval = [], {}, ("", "")
    per_it = base.batch_tasks * base.group_size
    jobs = [(e, s) for s in seeds for e in estimators]
    bar = tqdm(jobs, desc="compare", unit="run", position=0)
    for est, seed in bar:
        bar.set_postfix(estimator=est, seed=seed)
        # Every run starts from the same policy (shared warm start, LoRA adapter initialised as a no-op)
        # and evaluates on fixed episodes and decoding seeds, so the before-training evaluation is the
        # same for all runs: only the first run makes it.
        cfg = dataclasses.replace(base, estimator=est, seed=seed, eval_before=base.eval_before and not rows,
                                  out_dir=str(out / "runs" / f"{est}_seed{seed}"))
        t0 = time.perf_counter()
        try:
            run_dir = run_one(cfg, warm, args.fresh)
        except (ValueError, FileNotFoundError, NotImplementedError) as exc:
            print(f"bipace-compare: error in run {est} seed {seed}: {exc}", file=sys.stderr)
            return 2
        summary = json.loads((run_dir / "summary.json").read_text())
        walls[(est, seed)] = summary.get("wall_s", time.perf_counter() - t0)
        rows += read_run(run_dir, est, seed, start_eval)
        if not rows[0]["iteration"] and start_eval == ("", ""):
            start_eval = (rows[0]["eval_success"], rows[0]["eval_n"])
        # partial results survive a crash
        write_outputs(rows, estimators, walls, out, title, args.last, per_it, accuracy)
    table = write_outputs(rows, estimators, walls, out, title, args.last, per_it, accuracy)
    print(table)
    print(f"wrote {out / 'curves.csv'}, {out / 'curves.png'}, {out / 'summary.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
