"""Where can outcome-reward RL learn? Play a policy on TextCraft goals and print, per goal, its wins out of
``--repeats`` episodes at a temperature, next to the goal's recipe shape (ingredients of its simplest
recipe), and the actions of one lost episode; then the same by recipe shape, with the share of goals whose
episodes mixed wins and losses (a G-episode group of a goal that is never won, or always, has no signal).

    python -m benchmarks.learning.goal_probe --model runs/table/warm_start --split train --depths 1 \
        --repeats 8
    python -m benchmarks.learning.goal_probe --model runs/table/warm_start --split test --min-ingredients 2
    # after RL
    python -m benchmarks.learning.goal_probe --run runs/table/grpo_seed0 --split test --min-ingredients 2
    python -m benchmarks.learning.goal_probe --run runs/table/grpo_seed0 --goal-list runs/table/rl_goals.txt \
        --checkpoints 0 3 6 --repeats 8                # its training goals before, during and after RL

``--checkpoints`` plays the policy a run saved after each listed iteration on the same goals with the same
env and decoding seeds (0 = before its first update), so the change between iterations is the policy's,
not which goals a batch drew: the training-success column of ``train.csv`` is 8 random goals' rollouts.

Settings (max steps, history, prompts) default to the ``textcraft-table`` preset's (agents/presets.py); pass
that table's values if it ran with others. With ``--run`` they come from the run's ``config.json``, so
the policy plays the prompts it was trained on.
"""
from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import numpy as np

from agents.config import PROMPT_FIELDS
from agents.runs import checkpoint_adapter, load_run_adapter, run_policy
from bipace_envs.textcraft.goals import goal_ingredients


def chosen_goals(args, shapes: dict) -> list:
    """The goals to play: those of ``--goal-list`` (each must be a goal of the split and depths), else the
    split's goals of the chosen recipe shape; the first ``--goals`` of them when that is set."""
    from agents.envs import get_env_spec
    spec = get_env_spec("textcraft")
    split = spec.split_tasks(functools.partial(spec.make, max_steps=args.max_steps, preset="agentgym",
                                               depths=tuple(args.depths)), args.split)
    if args.goal_list:
        lines = (line.split("#")[0].strip() for line in args.goal_list.read_text().splitlines())
        wanted = {line for line in lines if line}
        unknown = sorted(wanted - {str(t) for t in split})
        if unknown or not wanted:
            what = f"names goals that are not {args.split} goals of depths {args.depths}: {unknown[:5]}" \
                if unknown else "names no goal"
            raise SystemExit(f"--goal-list {args.goal_list} {what}; give one goal id per line (a table's "
                             "rl_goals.txt, or goal_probe's --mixed-out) and the split it comes from "
                             "(--split)")
        goals = [t for t in split if str(t) in wanted]
    else:
        goals = [t for t in split if args.min_ingredients <= shapes.get(str(t), 1) <= args.max_ingredients]
    if args.goals:
        goals = goals[:args.goals]
    if not goals:
        raise SystemExit(f"no {args.split} goal of depths {args.depths} has {args.min_ingredients}-"
                         f"{args.max_ingredients} ingredients; widen --min/--max-ingredients")
    return goals


def probe_trainer(args, goals: list):
    """A Trainer holding the policy to play (a run's LoRA shape, still untrained) and its eval settings."""
    import torch

    from agents.config import TrainConfig
    from agents.trainer import Trainer
    torch.set_num_threads(args.threads)
    env_kwargs = json.dumps({"preset": "agentgym", "depths": args.depths})
    prompts = {"require_think": "no", "compact_prompts": "yes"} | getattr(args, "run_prompts", {})
    cfg = TrainConfig(model=args.model, **args.lora, env="textcraft", env_kwargs=env_kwargs,
                      max_steps=args.max_steps, history_length=args.history_length, **prompts,
                      max_new_tokens=args.max_new_tokens,
                      show_admissible=args.show_admissible, threads=args.threads, progress=False,
                      eval_split=args.split, eval_tasks=0, eval_batch=args.batch,
                      eval_temperature=args.temperature, out_dir=str(args.out), tensorboard=False)
    tasks = [g for g in goals for _ in range(args.repeats)]
    return Trainer(cfg, train_tasks=goals, eval_tasks=tasks)     # eval_tasks sizes the batch


def probe(args, tr, goals: list) -> dict:
    """Plays ``--repeats`` episodes of every goal with ``tr``'s policy, the same env and decoding seeds on
    every call; returns {goal: {"won": [...], "lost": actions of one lost episode}}."""
    import torch
    tasks = [g for g in goals for _ in range(args.repeats)]
    col = tr.collector("eval")
    seen: dict = {}
    t0 = time.perf_counter()
    for start in range(0, len(tasks), col.n):
        chunk = tasks[start:start + col.n]
        padded = chunk + [chunk[0]] * (col.n - len(chunk))
        torch.manual_seed(args.seed + start)
        ro = col.collect(padded, [args.seed + start + k for k in range(col.n)], list(range(col.n)))
        for k, goal in enumerate(chunk):
            rec = seen.setdefault(str(goal), {"won": [], "lost": None})
            rec["won"].append(bool(ro.success[k]))
            if not ro.success[k] and rec["lost"] is None:
                rec["lost"] = [a for a, e in zip(ro.actions, ro.env_index) if e == k]
        print(f"  {min(start + col.n, len(tasks))}/{len(tasks)} episodes, {time.perf_counter() - t0:.0f}s",
              flush=True)
    return seen


# what shapes a policy's prompts and episodes: a run is played with its own values
RUN_SETTINGS = ("max_steps", "history_length", "max_new_tokens", "show_admissible")


def use_run_settings(args, ap) -> None:
    """Sets ``args``' prompt and episode settings to the run's (``RUN_SETTINGS``, and the goal depths of its
    env); an explicit flag that disagrees with the run is an error."""
    cfg = json.loads((args.run / "config.json").read_text())
    run = {k: cfg[k] for k in RUN_SETTINGS if k in cfg}
    depths = json.loads(cfg.get("env_kwargs") or "{}").get("depths")
    if depths:
        run["depths"] = list(depths)
    # the run's other prompt settings, where it pinned them ("auto" resolves by model name, and a run's
    # model may be a warm-start folder: the table presets pin them)
    args.run_prompts = {k: cfg[k] for k in PROMPT_FIELDS
                        if k not in RUN_SETTINGS and k in cfg and cfg[k] != "auto"}
    for key, value in run.items():
        given = getattr(args, key)
        if given != ap.get_default(key) and given != value:
            ap.error(f"--{key.replace('_', '-')} {given} differs from the run's {value} "
                     f"({args.run}/config.json); drop the flag to play the run as it was trained")
        setattr(args, key, value)


def report(seen: dict, shapes: dict, repeats: int, show: int) -> str:
    table = [f"{'goal':30s} ingr. won/{repeats}  one lost episode's actions"]
    for goal, rec in seen.items():
        won = sum(rec["won"])
        lost = " | ".join(rec["lost"] or [])[:150] if won < len(rec["won"]) else ""
        table.append(f"{goal:30s} {shapes.get(goal, '?'):>5} {won:4d}    {lost}")
    if show < len(seen):     # --show 0: the summary alone, without a goal table's bare header
        table = table[:show + 1] + [f"... {len(seen) - show} more goals (--show)"] if show > 0 else []
    summary = ["by recipe shape: goals, success, goals with mixed outcomes (signal for a group of "
               f"{repeats}), goals never won"]
    by_shape: dict = {}
    for goal, rec in seen.items():
        by_shape.setdefault(shapes.get(goal, 0), []).append(rec["won"])
    for n, recs in sorted(by_shape.items()):
        rates = np.array([np.mean(r) for r in recs])
        mixed = int(np.sum((rates > 0) & (rates < 1)))
        summary.append(f"  {n} ingredient(s): {len(recs):3d} goals, success {rates.mean():.3f} "
                       f"({int(sum(map(sum, recs)))}/{sum(map(len, recs))}), mixed {mixed}, "
                       f"never won {int(np.sum(rates == 0))}")
    return "\n".join(table + [""] * bool(table) + summary)


def by_task(seen: dict) -> dict:
    """{goal: [won, episodes]}, the tallies ``benchmarks/learning/table_report.py`` reads."""
    return {goal: [sum(rec["won"]), len(rec["won"])] for goal, rec in seen.items()}


def curve_report(seen_at: dict) -> str:
    """Success of each checkpoint on the same goals and seeds (95% interval over episodes), and its change
    from the first one paired over goals (95% t-interval), with the goals that rose and fell."""
    from benchmarks.learning.table_report import fmt, paired_change, won_of
    first = min(seen_at)
    lines = [f"{'iteration':>9}  success (95% CI over episodes)   "
             f"change vs iteration {first} (paired over goals)"]
    for it in sorted(seen_at):
        tally = by_task(seen_at[it])
        won, n = won_of(tally)
        change = ""
        if it != first:
            d, half, up, down = paired_change(by_task(seen_at[first]), tally)
            change = f"{d:+.3f} ± {half:.3f} ({len(tally)} goals: up {up}, down {down})"
        lines.append(f"{it:9d}  {fmt(won / n, n):32s} {change}")
    return "\n".join(lines)


def main(argv=None) -> None:
    from agents.presets import get_preset
    table = get_preset("textcraft-table")      # the settings a table's policies were trained with
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a preset (smollm2-135m) or a folder, e.g. a warm start")
    ap.add_argument("--run", type=Path,
                    help="a finished RL run's folder: plays its policy (the run's --model plus its adapter)")
    ap.add_argument("--split", default="train", choices=["train", "test"])
    ap.add_argument("--depths", type=int, nargs="+", default=table.env_kwargs_dict()["depths"])
    ap.add_argument("--min-ingredients", type=int, default=1)
    ap.add_argument("--max-ingredients", type=int, default=9)
    ap.add_argument("--goals", type=int, default=0, help="only the first N chosen goals (0 = all)")
    ap.add_argument("--goal-list", type=Path,
                    help="play these goals (one id per line, e.g. a table's rl_goals.txt) instead of the "
                         "split's goals of --min/--max-ingredients")
    ap.add_argument("--checkpoints", type=int, nargs="+",
                    help="with --run: play the policy it saved after each of these iterations (0 = before "
                         "its first update) on the same goals and seeds, and print the curve")
    ap.add_argument("--repeats", type=int, default=8, help="episodes per goal (a GRPO group's size)")
    ap.add_argument("--temperature", type=float, default=table.temperature,
                    help="RL's rollout temperature by default")
    ap.add_argument("--max-steps", type=int, default=table.max_steps)
    ap.add_argument("--history-length", type=int, default=table.history_length)
    ap.add_argument("--max-new-tokens", type=int, default=table.max_new_tokens)
    ap.add_argument("--show-admissible", action=argparse.BooleanOptionalAction, default=table.show_admissible,
                    help="list the admissible actions in the prompt (off, as in train_table)")
    ap.add_argument("--batch", type=int, default=32, help="episodes played together")
    ap.add_argument("--seed", type=int, default=5000, help="first env and decoding seed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--show", type=int, default=200, help="goal lines printed")
    ap.add_argument("--out", type=Path, default=Path("runs/goal_probe"), help="scratch folder (config.json)")
    ap.add_argument("--json", type=Path, help="also write {goal: {won, lost}} here")
    ap.add_argument("--mixed-out", type=Path,
                    help="write the goals with both wins and losses here, one per line (for "
                         "benchmarks.learning.train_table --train-goals)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.min_ingredients > args.max_ingredients:
        ap.error("--repeats must be >= 1 and --min-ingredients <= --max-ingredients")
    if (args.model is None) == (args.run is None):
        ap.error("pass exactly one of --model (a base policy) and --run (an RL run's folder)")
    if args.checkpoints is not None and (args.run is None or min(args.checkpoints) < 0):
        ap.error("--checkpoints needs --run (the run that saved them) and iterations >= 0")
    if args.checkpoints is not None and args.mixed_out is not None:
        ap.error("--mixed-out writes one policy's goals with mixed outcomes: use it without --checkpoints "
                 "(with --run alone it plays the run's final policy)")
    if args.goal_list is not None and not args.goal_list.is_file():
        ap.error(f"--goal-list: no file {args.goal_list}")
    try:
        play(args, ap)
    except (FileNotFoundError, ValueError) as exc:
        raise SystemExit(f"--run: {exc}") from exc


def play(args, ap) -> None:
    args.lora = {}
    if args.run:            # a clear error before the goals are played
        args.model, args.lora = run_policy(args.run)
        use_run_settings(args, ap)
    iterations = sorted(set(args.checkpoints or []))
    adapters = {it: checkpoint_adapter(args.run, it) for it in iterations if it > 0}   # all there, first
    shapes = goal_ingredients()
    goals = chosen_goals(args, shapes)
    tr = probe_trainer(args, goals)
    if iterations:
        # a fresh LoRA adds nothing (its B is zero): iteration 0 is the run's policy before any update
        seen_at = {}
        for it in iterations:
            if it > 0:
                load_run_adapter(tr.model, args.run, adapters[it])
            print(f"iteration {it}:", flush=True)
            seen_at[it] = probe(args, tr, goals)
        if args.json:
            args.json.write_text(json.dumps({str(it): seen for it, seen in seen_at.items()}, indent=1))
        print(report(seen_at[iterations[-1]], shapes, args.repeats, args.show))
        print(f"\n{args.run}: its policy after each iteration on the same {len(goals)} goals, "
              f"{args.repeats} episodes each at temperature {args.temperature}")
        print(curve_report(seen_at))
        return
    if args.run:
        load_run_adapter(tr.model, args.run)
    seen = probe(args, tr, goals)
    if args.json:
        args.json.write_text(json.dumps(seen, indent=1))
    if args.mixed_out:
        mixed = [g for g, rec in seen.items() if 0 < sum(rec["won"]) < len(rec["won"])]
        args.mixed_out.write_text("".join(f"{g}\n" for g in mixed))
        print(f"{len(mixed)} goals with mixed outcomes written to {args.mixed_out}")
    print(report(seen, shapes, args.repeats, args.show))


if __name__ == "__main__":
    main()
