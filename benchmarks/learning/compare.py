"""``bipace-compare``: which estimator assigns credit best, rerun on your machine against the committed
leaderboard; or, one flag away, the accuracy stage on a SmolLM2 warm start and learning curves of several
estimators x seeds on one env, with the trainer.

    bipace-compare                                      # the leaderboard's cells that fit 15 min, replicated
    bipace-compare --full                               # every cell (its wall time first; resumable)
    bipace-compare --cells webshop-eps0.3 --out runs/ws # named cells
    bipace-compare --policy warm-start                  # preset "compare": the accuracy stage on SmolLM2
    bipace-compare --train                              # the warm start, then short RL runs of its estimators
    bipace-compare --preset tiny                        # the 1M-parameter model (fast, does not generalise)
    bipace-compare --estimators grpo gigpo bipace --seeds 0 1 2 --set iterations=20 --out runs/compare
    bipace-compare --preset qwen1.5b-alfworld --seeds 0 1 2          # the paper's setting on one GPU
    bipace-compare --set lr=1e-3 --set env_kwargs='{"preset": "agentgym", "depths": [1, 2]}'
    bipace-compare --set vector_mode=ray --set ray_address=auto     # envs in a Ray cluster's actors
    python -m benchmarks.learning.compare ...                    # the same, from a checkout

The default (``--policy cells``) is ``benchmarks/credit/replicate.py``: it reruns committed cells of
``benchmarks/credit/cells.py`` with a new seed, says per pair whether each replicates, pools those that do,
prints the verdict and draws ``leaderboard.png``. The rest of this docstring is the warm-start policy's path
(``--policy warm-start``, implied by any of ``--train``, ``--preset``, ``--estimators``, ``--seeds``,
``--set``, ``--no-accuracy``).

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
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

# CSV_FIELDS and summary_table: the report's, imported here for the command's users and tests
from benchmarks.learning.compare_report import CSV_FIELDS, summary_table  # noqa: F401
from benchmarks.learning.compare_report import read_run, write_outputs

# where the real answers are, for a first-time user of the short default
FULL_ACCURACY = ("python -m benchmarks.credit.advantage_accuracy --out runs/aa --ingredients 2+ "
                 "(docs/advantage-accuracy.md)")
FULL_LEARNING = "python -m benchmarks.learning.train_table --out runs/table (docs/experiments.md)"


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


def claim_warm_start_out(out: Path) -> None:
    """Mark ``out`` as the warm-start path's; refuse one the cells' path made (``replicate.claim_out``)."""
    from benchmarks.credit.replicate import CompareInputError, claim_out
    try:
        claim_out(out, "warm-start")
    except CompareInputError as exc:
        raise SystemExit(f"bipace-compare: error: {exc}") from None


def same_run_config(stored, cfg) -> bool:
    """Two configs train the same run: equal but for the preset's name, with BiGPO's layer and radius
    written out (a name or the flags that gave them do not matter)."""
    a, b = (dataclasses.asdict(c.bigpo_written_out()) for c in (stored, cfg))
    a.pop("preset_name"), b.pop("preset_name")
    return a == b


def run_one(cfg, warm_start: Path | None, fresh: bool) -> Path:
    """Train one (estimator, seed); reuse it when a finished run with the same config is on disk."""
    out = Path(cfg.out_dir)
    done = out / "summary.json"
    if not fresh and done.exists() and (out / "config.json").exists():
        # runs made before presets have no preset_name: the settings decide, not the name
        stored = json.loads((out / "config.json").read_text())
        known = {f.name for f in dataclasses.fields(cfg)}
        if set(stored) <= known and same_run_config(type(cfg)(**stored), cfg):
            print(f"reusing finished run {out}")
            return out
    if out.exists():
        shutil.rmtree(out)
    if warm_start is not None and (warm_start / "config.json").exists():
        shutil.copytree(warm_start, out / "warm_start")        # the trainer loads it instead of redoing SFT
    make_trainer_class()(cfg).train()
    return out


def build_parser() -> argparse.ArgumentParser:
    from agents.presets import describe
    from benchmarks.credit.cells import CELLS
    from benchmarks.credit.replicate import BUDGET_MIN, RERUN_SEED
    p = argparse.ArgumentParser(prog="bipace-compare", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--policy", choices=["cells", "warm-start"],
                   help="cells: rerun the committed leaderboard's cells (scripted policies) and check them; "
                        "warm-start: the accuracy stage (and --train's RL runs) on the preset's SmolLM2 warm "
                        "start (default: cells, or warm-start with any of --train, --preset, --estimators, "
                        "--seeds, --set, --no-accuracy)")
    p.add_argument("--cells", nargs="+", choices=sorted(CELLS), metavar="CELL",
                   help=f"cells to rerun (default: those that fit --budget); one of {sorted(CELLS)}")
    p.add_argument("--full", action="store_true", help="rerun every cell (its wall time is said first)")
    p.add_argument("--budget", type=float, default=BUDGET_MIN,
                   help="minutes the default cells may take together, from their committed timings")
    p.add_argument("--seed", type=int, default=RERUN_SEED, help="the reruns' seed (not a committed one)")
    p.add_argument("--no-progress", action="store_true", help="a line per stage instead of the bar")
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


def cells_main(args, parser) -> int:
    """The default: rerun committed cells and check them (``benchmarks/credit/replicate.py``)."""
    from benchmarks.credit.replicate import CompareInputError, run_cells
    from agents.run_folder import RunFolderError
    wrong = [f for f, given in (("--train", args.train), ("--estimators", args.estimators),
                                ("--seeds", args.seeds), ("--set", args.set),
                                ("--no-accuracy", args.no_accuracy)) if given]
    if wrong:
        parser.error(f"{', '.join(wrong)} belong to --policy warm-start (the RL comparison); the cells' "
                     "settings are in benchmarks/credit/cells.py")
    if args.budget <= 0 or not np.isfinite(args.budget):
        parser.error(f"--budget must be a positive number of minutes, got {args.budget}")
    try:
        import matplotlib  # noqa: F401  (the figure is the last step: fail before the cells, not after)
    except ImportError:
        parser.error("the leaderboard figure needs matplotlib: pip install 'bipace[bench]'")
    try:
        text = run_cells(args.cells, Path(args.out), args.full, args.budget, args.seed, not args.no_progress)
    except (CompareInputError, RunFolderError) as exc:
        print(f"bipace-compare: error: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


def main(argv=None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.policy is None:         # a flag of the RL comparison asks for it
        rl_flags = (args.train, args.estimators, args.seeds, args.set, args.no_accuracy,
                    args.preset != "compare")
        args.policy = "warm-start" if any(rl_flags) else "cells"
    if args.policy == "cells":
        return cells_main(args, parser)
    if args.cells or args.full:
        parser.error("--cells and --full rerun the leaderboard's cells: leave out --policy warm-start, "
                     "--train and --preset")
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
    claim_warm_start_out(out)
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
