"""The command line and settings of ``benchmarks.credit.advantage_accuracy``: its flags, what a named
cell (``--cell``, ``cells.py``) fills in, the preset's config as the benchmark plays it, and the policy.

    from benchmarks.credit.aa_settings import build_parser, settings
    args = build_parser().parse_args(["--cell", "webshop-eps0.3"]); cfg, bench_cfg = settings(args)
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from benchmarks.credit.cells import CELLS, DEFAULT_SIZE, SIZES
from benchmarks.credit.scripted_policy import parse_policy

DESCRIPTION = ("Which estimator assigns credit best: every estimator's advantages against Monte-Carlo "
               "advantages of the real policy, on the same real rollouts.")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.credit.advantage_accuracy",
                                description=DESCRIPTION,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/advantage_accuracy",
                   help="output folder (one writer at a time; --resume continues it)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run --out holds (its manifest must match these settings)")
    p.add_argument("--overwrite", action="store_true", help="empty --out first")
    p.add_argument("--cell", choices=sorted(CELLS),
                   help="a named env x policy cell of the leaderboard (benchmarks/credit/cells.py): its "
                        "preset, policy, size and goal filter, for each of those flags left out")
    p.add_argument("--preset", help="the RL settings (agents/presets.py; default textcraft-table)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any TrainConfig field (repeatable)")
    p.add_argument("--policy", help="scripted:EPS (the env's expert, a uniformly random admissible "
                                    "action with probability EPS; no model calls, the preset's model only "
                                    "embeds the prompts), or a model name or saved policy folder (as --model "
                                    "takes); default: the TextCraft table's warm start in --warm-start, "
                                    "built if missing")
    p.add_argument("--warm-start", default="runs/textcraft_warm_start",
                   help="where the default policy is kept (shared by runs)")
    p.add_argument("--ingredients", choices=["", "1", "2+"],
                   help="TextCraft difficulty: goals whose simplest recipe needs 1 or 2+ distinct "
                        "ingredients (default: any)")
    p.add_argument("--goals", type=Path, help="candidate goals instead (a file, one task id per line)")
    p.add_argument("--splits", nargs="+", metavar="SPLIT",
                   help="the splits whose tasks are candidates (default: the preset's train_split); several "
                        "only for an env that plays every split's tasks from one env (TextCraft)")
    p.add_argument("--exclude", nargs="+", type=Path, default=[], metavar="RUN",
                   help="leave out the goals of these finished runs' batches (a second batch on other goals)")
    p.add_argument("--pool", nargs="+", type=Path, metavar="RUN",
                   help="score these finished runs' batches as one (writes only the report in --out)")
    p.add_argument("--rescore", action="store_true",
                   help="score the finished run in --out again from its score_inputs.npz (after a change of "
                        "metric or interval; estimators registered since the run are added where its "
                        "batch.pkl is kept): rewrites its scores.csv, pairs.csv and summary.md")
    p.add_argument("--candidates", type=int,
                   help="screen at most this many candidate goals (a fixed draw; 0 = all; default: the "
                        "preset's Size)")
    p.add_argument("--tasks", type=int, help="B: goals in the batch (default: the preset's Size)")
    p.add_argument("--group-size", type=int, help="G: episodes per goal (default: the preset's Size)")
    p.add_argument("--samples", type=int,
                   help="K: MC continuations per distinct state (default: the preset's Size)")
    p.add_argument("--truth", choices=["plain", "strata"],
                   help="plain: K continuations per distinct state; strata: K per distinct state and "
                        "recorded action, the scripted policy's own probabilities as a control variate "
                        "(default: the cell's or preset's Size)")
    p.add_argument("--screen-repeats", type=int,
                   help="episodes per candidate goal in the screen (0: no screen, the first B candidates; "
                        "default: the preset's Size)")
    p.add_argument("--chunk", type=int, default=48, help="continuations played at once")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--estimators", nargs="+", help="default: every registered estimator")
    p.add_argument("--estimator", action="append", default=[], metavar="MODULE:FUNCTION",
                   help="also score your own estimator, fn(batch: StepBatch, options: EstimatorOptions) -> "
                        "(N,) advantages, importable from the current directory (repeatable; "
                        "benchmarks/credit/user_estimator.py)")
    p.add_argument("--workers", type=int, default=2,
                   help="processes that play a scripted policy's continuations")
    p.add_argument("--finished-goals", action="store_true",
                   help="play no continuations: score only the batch's leading goals whose every state "
                        "already has K of them (a run stopped for time; the goal order is fixed before "
                        "any outcome)")
    p.add_argument("--no-progress", action="store_true")
    return p


# ------------------------------------------------------------------------------------ settings
def apply_cell(args) -> None:
    """Fill the flags ``--cell`` names and the command line left out; then the plain defaults."""
    cell = CELLS.get(args.cell) if args.cell else None
    for flag, value in (("preset", cell and cell.preset), ("policy", cell and cell.policy),
                        ("ingredients", cell and cell.ingredients)):
        if getattr(args, flag) is None:
            setattr(args, flag, value if cell else {"preset": "textcraft-table"}.get(flag, ""))
    if cell:
        args.set = list(cell.sets) + list(args.set)
        if args.splits is None and cell.splits:
            args.splits = list(cell.splits)
    args.scripted = parse_policy(args.policy)


def settings(args):
    """(the preset's config with --set, the benchmark's config: the same with its BiGPO radius and layer
    resolved for the preset's model, no SFT, the batch's size and the screen's settings). Fills the
    size flags not given from the cell's or the preset's ``Size``."""
    from agents.presets import get_preset, resolve_name
    apply_cell(args)
    cfg = with_cell_bigpo(get_preset(args.preset, args.set), args.set)
    size = CELLS[args.cell].size if args.cell else SIZES.get(resolve_name(args.preset), DEFAULT_SIZE)
    for name, value in dataclasses.asdict(size).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("tasks", "group_size", "samples"):
        if getattr(args, name) < (2 if name == "samples" else 1):
            raise ValueError(f"--{name.replace('_', '-')} must be >= {2 if name == 'samples' else 1}")
    if args.truth == "strata" and not args.scripted:
        raise ValueError("--truth strata needs a scripted policy's exact action probabilities (--policy "
                         "scripted:EPS); a model policy samples the plain truth")
    if cfg.rl_rename > 0:
        raise ValueError("rl_rename > 0 plays renamed worlds that a replay cannot rebuild; use rl_rename=0")
    return cfg, dataclasses.replace(
        cfg, eps=cfg.resolved_eps(), hidden_layer=cfg.resolved_hidden_layer() or 0, sft_steps=0,
        batch_tasks=args.tasks, group_size=args.group_size, eval_split=cfg.train_split,
        eval_env_kwargs=cfg.env_kwargs,  # the screen plays the training split: its env, not the held-out one
        eval_repeats=max(1, args.screen_repeats),
        eval_temperature=cfg.temperature, eval_tasks=0, progress=not args.no_progress, tensorboard=False,
        resume=False)


# The BiGPO setting the committed cells were embedded and scored at: their batches hold that layer's states,
# so reruns and their comparisons keep it whatever a model's default becomes. The study of the others (the
# paper's among them): benchmarks/credit/hidden_sweep.py, docs/advantage-accuracy.md.
CELL_BIGPO_SETTING = "anchor-calibrated"
BIGPO_FIELDS = ("bigpo_setting", "eps", "hidden_layer")


def with_cell_bigpo(cfg, sets):
    """``cfg`` at ``CELL_BIGPO_SETTING`` where its model has that calibration, unless ``sets`` (the --set
    list) chooses a BiGPO setting, radius or layer itself: the user's choice is never overridden."""
    from agents.bigpo_settings import ANCHOR_CALIBRATIONS
    if any(s.split("=", 1)[0].strip() in BIGPO_FIELDS for s in sets) or cfg.model not in ANCHOR_CALIBRATIONS:
        return cfg
    return dataclasses.replace(cfg, bigpo_setting=CELL_BIGPO_SETTING)


def cell_config(manifest: dict):
    """The config a finished batch folder was played and scored with, from its manifest.json."""
    from agents.presets import get_preset
    sets = list(manifest.get("set", []))
    return with_cell_bigpo(get_preset(manifest["preset"], sets), sets)


def default_policy(args, cfg) -> str:
    """--policy, or the TextCraft table's warm start (preset ``textcraft-table``'s SFT on its depth-1
    training goals, whatever --set says; built once into --warm-start)."""
    if args.policy:
        return args.policy
    warm = Path(args.warm_start)
    if not (warm / "config.json").exists():
        if cfg.env != "textcraft":
            raise ValueError(f"the default policy is TextCraft's warm start; for env {cfg.env!r} pass "
                             "--policy")
        from agents.presets import get_preset
        from benchmarks.warm_start import build_warm_start
        print(f"building the TextCraft table's warm start in {warm} (once; 11-20 min on 2 cores)", flush=True)
        build_warm_start(get_preset("textcraft-table"), warm)
    return str(warm)


def with_policy(cfg, policy: str, out_dir: Path):
    """``cfg`` playing ``policy`` (a folder or name) with the prompts its preset's model gets: the "auto"
    settings that follow the model's name (think tags, compact prompts) are pinned first, since a warm
    start's folder name says nothing about the model it came from. A scripted policy keeps the preset's
    model, which embeds its prompts."""
    model = cfg.model if parse_policy(policy) else policy
    return dataclasses.replace(cfg, require_think="yes" if cfg.think_required() else "no",
                               compact_prompts="yes" if cfg.compact() else "no", model=model,
                               out_dir=str(out_dir))
