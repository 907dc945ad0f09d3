"""Which estimator assigns credit best: every estimator's advantages against Monte-Carlo advantages of the
real policy, on the same real rollouts (hidden states, observation hashes, action keys and all).

    python -m benchmarks.credit.advantage_accuracy --out runs/aa_2plus --ingredients 2+   # 23 min on 2 cores
    python -m benchmarks.credit.advantage_accuracy --out runs/aa_1 --ingredients 1        # 9 min (98.6% won)
    python -m benchmarks.credit.advantage_accuracy --out runs/x --policy PATH --set env=...  # another one

Steps, each kept in ``--out`` so a stopped run continues where it was:
1. The policy: ``--policy`` or, by default, the TextCraft table's warm start (SmolLM2-135M, preset
   ``textcraft-table``'s SFT; built once into ``--warm-start`` by ``benchmarks.warm_start``).
2. The goals: a screen plays every candidate training goal ``--screen-repeats`` times at the RL temperature;
   the batch takes ``--tasks`` goals the policy both won and lost there (mixed outcomes, where the
   estimators' signals differ; then goals always won, if too few), a fixed draw (``--seed``).
3. The batch every estimator sees: G = ``--group-size`` episodes per goal with the RL settings of the
   preset (temperature, prompts, horizon), hidden states captured as in training; GACA's log-probs and
   HCAPO/RELACE's hindsight pass are filled as ``bipace-train`` fills them.
4. Ground truth (``benchmarks/credit/mc_truth.py``): from each distinct state s_t of the batch, ``--samples``
   K continuations with the same policy and temperature, the state reached by deterministic replay (reset
   with the episode's task and seed, its action prefix re-applied and every observation hash checked),
   so the continuation's prompts carry the same history as the recorded episode's. V(s_t) is their mean
   return, Q(s_t, a_t) = r_t + gamma W(s_{t+1}); A = Q - V with its standard error. The same for the env's
   expert (deterministic, no model calls): QVal's reference-policy view.
5. Scores (``benchmarks/credit/advantage_report.py``): correlations, sign agreement, scaled NMSE, singleton
   and impure rates, rank agreement with the expert's A; 95% bootstrap intervals over goals and paired
   differences (bipace - gigpo, gigpo - grpo, every estimator - grpo). Estimator settings are the
   preset's (the trainer's options; BiGPO's radius as calibrated for the model), nothing tuned here.

Outputs in ``--out``: rows.csv (per row: goal, step, Q, V, A, SE, expert A, every estimate), scores.csv,
pairs.csv, summary.md, accuracy.png.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Size:
    """How much the benchmark plays: B goals x G episodes, K continuations per distinct state, and the
    screen's episodes per candidate goal and how many candidates it plays (0 = all). Named per training
    preset (``SIZES``); flags override."""
    tasks: int
    group_size: int
    samples: int
    screen_repeats: int
    candidates: int = 0


SIZES = {
    # the TextCraft table's policy and settings; sized in docs/advantage-accuracy.md
    "textcraft-table": Size(tasks=12, group_size=6, samples=8, screen_repeats=2),
    # bipace-compare's first stage: a few minutes on 2 cores before its short RL runs
    "compare": Size(tasks=6, group_size=4, samples=4, screen_repeats=2, candidates=30),
}
DEFAULT_SIZE = SIZES["textcraft-table"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/advantage_accuracy", help="output folder (a rerun continues it)")
    p.add_argument("--preset", default="textcraft-table", help="the RL settings (agents/presets.py)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any TrainConfig field (repeatable)")
    p.add_argument("--policy", default="", help="a model name or saved policy folder (as --model takes); "
                                                "default: the TextCraft table's warm start in --warm-start, "
                                                "built if missing")
    p.add_argument("--warm-start", default="runs/textcraft_warm_start",
                   help="where the default policy is kept (shared by runs)")
    p.add_argument("--ingredients", default="", choices=["", "1", "2+"],
                   help="TextCraft difficulty: goals whose simplest recipe needs 1 or 2+ distinct "
                        "ingredients (default: any)")
    p.add_argument("--goals", type=Path, help="candidate goals instead (a file, one task id per line)")
    p.add_argument("--candidates", type=int,
                   help="screen at most this many candidate goals (a fixed draw; 0 = all; default: the "
                        "preset's Size)")
    p.add_argument("--tasks", type=int, help="B: goals in the batch (default: the preset's Size)")
    p.add_argument("--group-size", type=int, help="G: episodes per goal (default: the preset's Size)")
    p.add_argument("--samples", type=int,
                   help="K: MC continuations per distinct state (default: the preset's Size)")
    p.add_argument("--screen-repeats", type=int,
                   help="episodes per candidate goal in the screen (0: no screen, the first B candidates; "
                        "default: the preset's Size)")
    p.add_argument("--chunk", type=int, default=48, help="continuations played at once")
    p.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of the goals")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--estimators", nargs="+", help="default: every registered estimator")
    p.add_argument("--no-progress", action="store_true")
    return p


# ------------------------------------------------------------------------------------ settings
def settings(args):
    """(the preset's config with --set, the benchmark's config: the same with its BiGPO radius and layer
    resolved for the preset's model, no SFT, the batch's size and the screen's settings). Fills the
    size flags not given from the preset's ``Size``."""
    from agents.presets import get_preset, resolve_name
    cfg = get_preset(args.preset, args.set)
    size = SIZES.get(resolve_name(args.preset), DEFAULT_SIZE)
    for name, value in dataclasses.asdict(size).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    for name in ("tasks", "group_size", "samples"):
        if getattr(args, name) < (2 if name == "samples" else 1):
            raise ValueError(f"--{name.replace('_', '-')} must be >= {2 if name == 'samples' else 1}")
    if cfg.rl_rename > 0:
        raise ValueError("rl_rename > 0 plays renamed worlds that a replay cannot rebuild; use rl_rename=0")
    return cfg, dataclasses.replace(
        cfg, eps=cfg.resolved_eps(), hidden_layer=cfg.resolved_hidden_layer() or 0, sft_steps=0,
        batch_tasks=args.tasks, group_size=args.group_size, eval_split=cfg.train_split,
        eval_repeats=max(1, args.screen_repeats),
        eval_temperature=cfg.temperature, eval_tasks=0, progress=not args.no_progress, tensorboard=False,
        resume=False)


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
    start's folder name says nothing about the model it came from."""
    return dataclasses.replace(cfg, require_think="yes" if cfg.think_required() else "no",
                               compact_prompts="yes" if cfg.compact() else "no", model=policy,
                               out_dir=str(out_dir))


def candidate_goals(args, trainer) -> list:
    tasks = list(trainer.train_tasks)
    if args.goals:
        wanted = [line.split("#")[0].strip() for line in args.goals.read_text().splitlines()]
        wanted = {w for w in wanted if w}
        tasks = [t for t in tasks if str(t) in wanted]
        if not tasks:
            raise ValueError(f"--goals {args.goals}: none of its ids is a training task of this env")
    if args.ingredients:
        from bipace_envs.textcraft.goals import goal_ingredients
        need = goal_ingredients()
        two = args.ingredients == "2+"
        tasks = [t for t in tasks if (need.get(str(t), 1) >= 2) == two]
    if args.candidates and len(tasks) > args.candidates:
        pick = np.random.default_rng(args.seed).choice(len(tasks), args.candidates, replace=False)
        tasks = [tasks[i] for i in sorted(pick)]
    if not tasks:
        raise ValueError("no candidate goals left after --goals/--ingredients")
    return tasks


def choose_goals(by_task: dict, tasks: list, b: int, seed: int) -> tuple[list, str]:
    """B goals: mixed outcomes in the screen first, then always-won ones; a message when that is not B."""
    wins = {str(t): by_task.get(str(t), [0, 0]) for t in tasks}
    mixed = [t for t in tasks if 0 < wins[str(t)][0] < wins[str(t)][1]]
    always = [t for t in tasks if wins[str(t)][1] and wins[str(t)][0] == wins[str(t)][1]]
    if not mixed and not always:
        raise SystemExit("the policy never won any candidate goal in the screen: every advantage of every "
                         "estimator would be zero (sparse win reward) and the MC truth too. Use a stronger "
                         "policy (--policy), easier goals, or more --screen-repeats")
    rng = np.random.default_rng(seed)
    chosen = list(rng.permutation(np.array(mixed, dtype=object)))[:b]
    chosen += list(rng.permutation(np.array(always, dtype=object)))[:b - len(chosen)]
    note = (f"{len(mixed)} of {len(tasks)} candidate goals had mixed outcomes in the screen and "
            f"{len(always)} were always won; the batch takes {len(chosen)}")
    return sorted(chosen, key=str), note


# ------------------------------------------------------------------------------------ stages
def screen(trainer, tasks, out: Path) -> dict:
    path = out / "screen.json"
    if not path.exists():
        trainer.eval_tasks = list(tasks)
        ev = trainer.evaluate(out / "screen.chunks.jsonl")
        path.write_text(json.dumps({"eval_success": ev["eval_success"], "by_task": trainer.eval_by_task}))
        (out / "screen.chunks.jsonl").unlink(missing_ok=True)
    return json.loads(path.read_text())


def record_batch(trainer, goals: list, args, out: Path):
    """The batch every estimator sees (kept in batch.pkl): B goals x G episodes, one seed per goal."""
    path = out / "batch.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    import torch
    from agents.ppo import row_logp_sums
    from estimators import REGISTRY
    c = trainer.cfg
    rng = np.random.default_rng([args.seed, 1])
    tasks = [g for g in goals for _ in range(c.group_size)]
    seeds = np.repeat(rng.integers(0, 2**31 - 1, len(goals)), c.group_size).tolist()
    groups = np.repeat(np.arange(len(goals)), c.group_size)
    torch.manual_seed(args.seed)
    trainer.model.eval()
    t0 = time.perf_counter()
    ro = trainer.collector("train").collect(tasks, seeds, groups)
    batch = ro.batch.with_fields(**row_logp_sums(ro.response_ids, ro.old_logprobs))
    stats = {"rollout_s": time.perf_counter() - t0}
    if any("hind_logp_sum" in REGISTRY[n].needs for n in REGISTRY):
        from agents.hindsight import score_hindsight, settings_for
        sums, hstats = score_hindsight(trainer.model, trainer.tok, ro, settings_for(c))
        batch = batch.with_fields(hind_logp_sum=sums)
        stats["hindsight_s"] = hstats.get("seconds", 0.0)
    ro.batch = batch
    saved = {"ro": ro, "tasks": tasks, "seeds": seeds, "goals": goals, "stats": stats}
    path.write_bytes(pickle.dumps(saved))
    return saved


class PolicyPlay:
    """Continuations from replayed states with the policy: ``chunk`` envs of one collector at a time."""

    def __init__(self, trainer, chunk: int, seed: int):
        from agents.prompts import make_prompter
        from agents.rollout import RolloutCollector
        c, self.chunk, self.seed = trainer.cfg, chunk, seed
        base = trainer.collector("train").s
        settings = dataclasses.replace(base, capture_hidden=False, logprobs=False)
        self.collector = RolloutCollector(trainer.model, trainer.tok, trainer.make_env, chunk,
                                          make_prompter(c.env, trainer.prompt_settings), settings,
                                          trainer.spec.reward_map, fallback_chars=trainer.spec.fallback_chars)

    def __call__(self, jobs, chunk_seed):
        import torch
        n = len(jobs)
        jobs = jobs + [jobs[-1]] * (self.chunk - n)          # the collector plays a fixed number of envs
        torch.manual_seed(self.seed * 1_000_003 + chunk_seed)
        ro = self.collector.collect([j[0] for j in jobs], [j[1] for j in jobs], list(range(self.chunk)),
                                    replays=[j[2] for j in jobs])
        out = []
        for i in range(n):
            rows = np.flatnonzero(ro.env_index == i)
            rows = rows[np.argsort(ro.batch.step_idx[rows], kind="stable")]
            out.append((ro.batch.reward[rows].tolist(), ro.batch.action_valid[rows].tolist(),
                        bool(ro.success[i])))
        return out

    def close(self):
        self.collector.close()


def ground_truth(trainer, saved: dict, args, out: Path):
    """MC truth of the batch's rows (continuations kept in continuations.jsonl) and the expert's A."""
    from benchmarks.credit.mc_truth import (ContinuationStore, episodes_of, expert_advantage,
                                            expert_values, mc_truth, plan_starts, run_continuations)
    c, ro = trainer.cfg, saved["ro"]
    plan = plan_starts(episodes_of(ro, saved["tasks"], saved["seeds"]))
    store = ContinuationStore(out / "continuations.jsonl")
    todo = sum(max(0, args.samples - store.count(k)) for k in plan.keys)
    print(f"ground truth: {len(plan.starts)} distinct states of {len(ro.batch)} rows x K={args.samples}; "
          f"{todo} continuations to play", flush=True)
    t0 = time.perf_counter()
    if todo:
        play = PolicyPlay(trainer, min(args.chunk, todo), args.seed)
        try:
            run_continuations(plan, args.samples, play, store, play.chunk, c.gamma,
                              progress=not args.no_progress)
        finally:
            play.close()
    mc_s = time.perf_counter() - t0
    truth = mc_truth(plan, store, ro.batch.reward, ro.batch.action_valid, c.gamma, c.invalid_penalty)
    expert_file = out / "expert_values.npy"
    if not expert_file.exists():
        spec = trainer.spec
        np.save(expert_file, expert_values(plan, trainer.make_env, spec.expert, spec.reward_map, c.gamma,
                                           spec.expert_reset_options))
    expert_adv = expert_advantage(plan, np.load(expert_file), ro.batch.reward, ro.batch.action_valid, c.gamma,
                                  c.invalid_penalty)
    return truth, expert_adv, mc_s


def write_rows(path: Path, saved: dict, truth, expert_adv, estimates: dict) -> None:
    ro, b = saved["ro"], saved["ro"].batch
    names = [n for n, e in estimates.items() if e.adv is not None]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["goal", "episode", "step", "action", "reward", "valid", "Q", "V", "A", "A_se",
                    "V_samples", "expert_A", *names])
        for i in range(len(b)):
            w.writerow([saved["tasks"][ro.env_index[i]], ro.env_index[i], b.step_idx[i], ro.actions[i],
                        b.reward[i], int(b.action_valid[i]), f"{truth.q[i]:.4f}", f"{truth.v[i]:.4f}",
                        f"{truth.adv[i]:.4f}", f"{truth.se[i]:.4f}", int(truth.n[i]), f"{expert_adv[i]:.4f}",
                        *(f"{estimates[n].adv[i]:.5f}" for n in names)])


def run(args) -> dict:
    from agents.trainer import Trainer
    from benchmarks.credit.advantage_report import (estimator_advantages, markdown, plot, score_all,
                                                    verdict, write_csvs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    preset_cfg, cfg = settings(args)
    policy = default_policy(args, preset_cfg)
    cfg = with_policy(cfg, policy, out / "policy")
    wall0 = time.perf_counter()
    trainer = Trainer(cfg)
    tasks = candidate_goals(args, trainer)
    if args.screen_repeats > 0:
        scr = screen(trainer, tasks, out)
        goals, note = choose_goals(scr["by_task"], tasks, args.tasks, args.seed)
        note += (f" (screen success {100 * scr['eval_success']:.1f}% over {args.screen_repeats} "
                 "episode(s) each)")
    else:
        goals, note = tasks[:args.tasks], f"the first {min(args.tasks, len(tasks))} candidates (no screen)"
    print(note, flush=True)
    if len(goals) != cfg.batch_tasks:          # fewer usable goals than --tasks: a smaller batch
        trainer.cfg = cfg = dataclasses.replace(cfg, batch_tasks=len(goals))
    saved = record_batch(trainer, goals, args, out)
    ro = saved["ro"]
    won = float(ro.success.mean())
    print(f"batch: {len(goals)} goals x G={cfg.group_size}, {len(ro.batch)} rows, success {100 * won:.1f}%",
          flush=True)
    truth, expert_adv, mc_s = ground_truth(trainer, saved, args, out)
    if not np.any(truth.adv != 0):
        raise SystemExit("every MC advantage is zero (no continuation from any state won): the policy never "
                         "wins these goals, so no estimator has anything to be right about")
    estimates = estimator_advantages(ro.batch, cfg.estimator_kwargs(), args.estimators)
    res = score_all(estimates, truth, ro.batch.group_id, expert_adv, args.bootstrap, args.seed)
    write_rows(out / "rows.csv", saved, truth, expert_adv, estimates)
    write_csvs(res, out)
    reliable = 1 - float(np.mean(truth.se ** 2) / max(np.var(truth.adv), 1e-12))
    setting = (f"{cfg.env} ({args.ingredients or 'any'} ingredient goals), policy {Path(policy).name}, "
               f"T={cfg.temperature}: {len(goals)} goals x G={cfg.group_size} ({len(ro.batch)} rows, "
               f"episode success {100 * won:.1f}%), K={args.samples} continuations per distinct state, "
               f"gamma {cfg.gamma}")
    header = (f"Estimator advantages vs Monte-Carlo A = Q - V on the same real rollouts: {setting}. "
              f"{note}. Reliability of the MC A (share of its variance that is not sampling noise): "
              f"{reliable:.2f}; mean SE {truth.se.mean():.3f}, mean |A| {np.abs(truth.adv).mean():.3f}. "
              f"Rows with |A| > 2 SE (sign column): {int(np.sum(np.abs(truth.adv) > 2 * truth.se))}. "
              f"Values: all rows; [95% bootstrap interval over {res.n_goals} goals, {args.bootstrap} "
              "resamples].")
    table = markdown(res, header)
    lines = verdict(res)
    table += "\n" + "\n".join(f"- {line}" for line in lines) + "\n"
    (out / "summary.md").write_text(table)
    plot(res, estimates, truth.adv, truth.se, out / "accuracy.png", setting)
    timing = {"rollout_s": saved["stats"]["rollout_s"], "mc_s_this_call": mc_s,
              "wall_s_this_call": time.perf_counter() - wall0}
    (out / "timing.json").write_text(json.dumps(timing))
    print(table)
    print(f"wrote {out}/rows.csv, scores.csv, pairs.csv, summary.md, accuracy.png; times {timing}")
    return {"results": res, "truth": truth, "estimates": estimates, "success": won}


def main(argv=None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"advantage_accuracy: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
