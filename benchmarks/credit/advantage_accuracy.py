"""Which estimator assigns credit best: every estimator's advantages against Monte-Carlo advantages of the
real policy, on the same real rollouts (hidden states, observation hashes, action keys and all).

    python -m benchmarks.credit.advantage_accuracy --out runs/aa_2plus --ingredients 2+   # 25 min on 2 cores
    python -m benchmarks.credit.advantage_accuracy --out runs/aa_2plus_b --ingredients 2+ --seed 1 \\
        --splits train test --exclude runs/aa_2plus                    # a second batch on other goals
    python -m benchmarks.credit.advantage_accuracy --pool runs/aa_2plus runs/aa_2plus_b --out runs/aa_pooled
    python -m benchmarks.credit.advantage_accuracy --out runs/x --policy PATH --set env=...  # another one
    python -m benchmarks.credit.advantage_accuracy --cell webshop-eps0.3 --out runs/aa/ws   # a cell
    python -m benchmarks.credit.advantage_accuracy --cell alfworld-eps0.5 --out runs/a \
        --estimator my_package.my_module:my_advantage                   # and your own estimator beside ours

Steps, each kept in ``--out`` so a stopped run continues where it was (``manifest.json`` holds every
setting that shaped the folder's files; a rerun with another one stops and names it):
1. The policy: ``--policy`` or, by default, the TextCraft table's warm start (SmolLM2-135M, preset
   ``textcraft-table``'s SFT; built once into ``--warm-start`` by ``benchmarks.warm_start``).
   ``--policy scripted:EPS`` plays the env's expert with a random admissible action with probability EPS
   (``scripted.py``): no model calls in play, the preset's model only embeds the prompts, so ALFWorld and
   WebShop fit on 2 cores. ``--cell NAME`` names a leaderboard column (``cells.py``: preset, policy, size).
2. The goals: the tasks of ``--splits`` (default the preset's training split), less ``--exclude``'s batches;
   a screen plays each ``--screen-repeats`` times at the RL temperature; the batch takes ``--tasks`` goals
   the policy both won and lost there (mixed outcomes, where the estimators' signals differ; then goals
   always won, if too few), a fixed draw (``--seed``).
3. The batch every estimator sees: G = ``--group-size`` episodes per goal with the RL settings of the
   preset (temperature, prompts, horizon), hidden states captured as in training; GACA's log-probs and
   HCAPO/RELACE's hindsight pass are filled as ``bipace-train`` fills them (``policy_play.py``).
4. Ground truth (``mc_truth.py``): from each distinct state s_t of the batch, ``--samples`` K continuations
   with the same policy and temperature, from a random stream of their own, the state reached by
   deterministic replay (reset with the episode's task and seed, its action prefix re-applied and every
   observation hash checked) and the player's own state with it (``players.py``: a model's prompt history,
   each first prompt checked against the recorded one token for token; a scripted policy's expert state,
   rebuilt by asking it along the prefix, each answer checked against the recorded suggestion). V(s_t) is
   their mean return, Q(s_t, a_t) = r_t + gamma W(s_{t+1}); A = Q - V with its
   standard error (floored: K agreeing samples do not make a value certain). The same for the env's
   expert (deterministic, no model calls): QVal's reference-policy view.
5. Scores (``advantage_report.py``): pooled and within-goal correlations, sign agreement, scaled NMSE,
   singleton and impure rates, rank agreement with the expert's A, at each estimator's own normalisation
   and at one common one; 95% jackknife-t intervals over goals; paired differences at the common
   normalisation, BiPACE's ingredients apart first (pace - gigpo, bigpo - gigpo, bipace - pace,
   bipace - gigpo), then every estimator against gigpo. Estimator settings are the preset's (the trainer's
   options; BiGPO's radius as calibrated for the model), nothing tuned here.
``--pool`` scores several finished batches as one (their goals and states kept apart).

``--estimator MODULE:FUNCTION`` (repeatable) scores your own estimator beside the registered ones
(``user_estimator.py`` holds the contract, ``example_estimator.py`` an example).

Outputs in ``--out``: rows.csv (per row: goal, step, Q, V, A, SE, expert A, every estimate), scores.csv,
pairs.csv, summary.md, accuracy.png, score_inputs.npz (what ``--pool`` reads).
"""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.credit.aa_settings import (build_parser, default_policy, settings,
                                           with_policy)
from benchmarks.credit.cells import CELLS, DEFAULT_SIZE, SIZES, Size  # noqa: F401  (Size: users' sizes)
from benchmarks.credit.scripted_policy import ExpertCannotAct


def batch_goals(run: Path) -> list[str]:
    """The goal ids of a finished run's batch (its manifest keeps them)."""
    path = Path(run) / "goals.json"
    if not path.exists():
        raise FileNotFoundError(f"--exclude/--pool {run}: no goals.json there; is it a finished run of "
                                "this benchmark?")
    return json.loads(path.read_text())


def excluded_goals(args) -> set[str]:
    """The goals of the batches ``--exclude`` names."""
    return {g for run in args.exclude for g in batch_goals(run)}


def candidate_goals(args, trainer) -> list:
    splits = args.splits or [trainer.cfg.train_split]
    if len(splits) > 1 and trainer.spec.split_kwarg:
        raise ValueError(f"{trainer.cfg.env} builds one split per env; --splits takes one of them here "
                         f"(got {splits})")
    tasks = []
    for split in splits:
        listed = trainer.train_tasks if split == trainer.cfg.train_split else trainer.spec.split_tasks(
            trainer.make_env, split)
        tasks += [t for t in listed if str(t) not in {str(x) for x in tasks}]
    if args.goals:
        wanted = [line.split("#")[0].strip() for line in args.goals.read_text().splitlines()]
        wanted = {w for w in wanted if w}
        tasks = [t for t in tasks if str(t) in wanted]
        if not tasks:
            raise ValueError(f"--goals {args.goals}: none of its ids is a task of {splits}")
    if args.ingredients:
        if trainer.cfg.env != "textcraft":
            raise ValueError("--ingredients filters TextCraft goals by recipe; use --goals for other envs")
        from bipace_envs.textcraft.goals import goal_ingredients
        need = goal_ingredients()
        two = args.ingredients == "2+"
        tasks = [t for t in tasks if (need.get(str(t), 1) >= 2) == two]
    taken = excluded_goals(args)
    tasks = [t for t in tasks if str(t) not in taken]
    if args.candidates and len(tasks) > args.candidates:
        pick = np.random.default_rng(args.seed).choice(len(tasks), args.candidates, replace=False)
        tasks = [tasks[i] for i in sorted(pick)]
    if not tasks:
        raise ValueError("no candidate goals left after --splits/--goals/--ingredients/--exclude")
    return tasks


def truth_plan(saved: dict, truth: str):
    """(plan, its store's file name) of the truth's sampling scheme: plain continuations per distinct state,
    or the scripted policy's strata (``strata.py``)."""
    if truth == "strata":
        from benchmarks.credit.mc_truth import episodes_of
        from benchmarks.credit.strata import plan_strata
        ro = saved["ro"]
        return (plan_strata(episodes_of(ro, saved["tasks"], saved["seeds"]), np.exp(ro.batch.old_logp_sum)),
                "strata.jsonl")
    return plan_states(saved), "continuations.jsonl"


def ground_truth(trainer, player, saved: dict, samples: int, out: Path, truth_kind: str = "plain",
                 progress: bool = True):
    """MC truth of the batch's rows (continuations kept in continuations.jsonl, or strata.jsonl), its two
    split halves' advantages and, where the player is not the env's expert itself, the expert's A (its values
    kept by state key in expert_values.json)."""
    from benchmarks.credit import strata
    from benchmarks.credit.mc_noise import split_half_advantages
    from benchmarks.credit.mc_truth import (ContinuationStore, expert_advantage, expert_values, mc_truth,
                                            run_continuations)
    c, ro = trainer.cfg, saved["ro"]
    plan, store_name = truth_plan(saved, truth_kind)
    store = ContinuationStore(out / store_name)
    todo = sum(max(0, samples - store.count(k)) for k in plan.keys)
    units = "distinct (state, recorded action) strata" if truth_kind == "strata" else "distinct states"
    print(f"ground truth ({truth_kind}): {len(plan.starts)} {units} of {len(ro.batch)} rows x K={samples}; "
          f"{todo} continuations to play", flush=True)
    t0 = time.perf_counter()
    if todo:
        play = player.continuations(plan, saved, todo)
        try:
            run_continuations(plan, samples, play, store, play.chunk, c.gamma, progress=progress)
        finally:
            play.close()
        print(player.checked_line(play), flush=True)
    mc_s = time.perf_counter() - t0
    b = ro.batch
    if truth_kind == "strata":
        truth = strata.strata_truth(plan, store, b.reward, c.gamma)
        halves = strata.split_half_advantages(plan, store, b.reward, c.gamma)
    else:
        truth = mc_truth(plan, store, b.reward, b.action_valid, c.gamma, c.invalid_penalty)
        halves = split_half_advantages(plan, store, b.reward, b.action_valid, c.gamma, c.invalid_penalty)
    if not player.expert_view:      # the policy is the expert but for eps: no second, independent view
        return truth, np.stack(halves), None, mc_s
    expert_file = out / "expert_values.json"
    states = plan if truth_kind == "plain" else plan_states(saved)
    known = json.loads(expert_file.read_text()) if expert_file.exists() else {}
    if any(k not in known for k in states.keys):
        spec = trainer.spec
        values = expert_values(states, trainer.make_env, spec.expert, spec.reward_map, c.gamma,
                               spec.expert_reset_options)
        known = {k: float(v) for k, v in zip(states.keys, values)}
        expert_file.write_text(json.dumps(known))
    w_expert = np.array([known[k] for k in states.keys])
    expert_adv = expert_advantage(states, w_expert, b.reward, b.action_valid, c.gamma, c.invalid_penalty)
    return truth, np.stack(halves), expert_adv, mc_s


def plan_states(saved: dict):
    """The batch's distinct states (``mc_truth.plan_starts``)."""
    from benchmarks.credit.mc_truth import episodes_of, plan_starts
    return plan_starts(episodes_of(saved["ro"], saved["tasks"], saved["seeds"]))


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
                        f"{truth.adv[i]:.4f}", f"{truth.se[i]:.4f}", int(truth.n[i]),
                        "" if expert_adv is None else f"{expert_adv[i]:.4f}",
                        *(f"{estimates[n].adv[i]:.5f}" for n in names)])


KEPT = ("screen.json", "screen.chunks.jsonl", "goals.json", "batch.pkl", "continuations.jsonl",
        "strata.jsonl", "expert_values.json")


def manifest_settings(args, cfg, policy: str) -> dict:
    """Every setting that shapes the kept files (the estimators and the report do not: they are recomputed
    on every call)."""
    from benchmarks.credit.manifest import fingerprint
    goals = None
    if args.goals:
        lines = args.goals.read_text().splitlines()
        goals = sorted(w for w in (line.split("#")[0].strip() for line in lines) if w)
    return {"preset": args.preset, "set": list(args.set), "policy": policy,
            "policy_sha1": fingerprint(policy), "env": cfg.env, "splits": args.splits or [cfg.train_split],
            "ingredients": args.ingredients,
            "goals": goals, "exclude": sorted(excluded_goals(args)),
            "candidates": args.candidates, "tasks": args.tasks, "group_size": args.group_size,
            "samples": args.samples, "screen_repeats": args.screen_repeats, "seed": args.seed,
            **({"truth": args.truth} if args.truth != "plain" else {}),   # plain: what every earlier run did
            "chunk": args.chunk,
            # policy_state: continuations rebuild and check the scripted policy's own state (before it,
            # WebShop's continuations followed an oracle that never fell back)
            **({"embed_model": cfg.model, "policy_state": "replayed"} if args.scripted else {})}


def report(inputs, out: Path, header: str) -> tuple:
    """Score ``inputs`` at both normalisations; write scores.csv, pairs.csv and summary.md."""
    from benchmarks.credit.advantage_report import markdown, score, verdict, write_csvs
    own, common = score(inputs, "own"), score(inputs, "common")
    write_csvs([own, common], out)
    text = markdown(own, common, header)
    text += "\n" + "\n".join(f"- {line}" for line in verdict(common)) + "\n"
    (out / "summary.md").write_text(text)
    return own, common, text


def run(args, on_stage=None) -> dict:
    """The benchmark as ``main`` runs it; ``on_stage(name)`` (if given) hears each stage as it starts:
    "screen", "batch", "truth", "scores" (``bipace-compare``'s progress bar)."""
    from agents.run_folder import claim_run_folder
    out = Path(args.out)
    # one writer per folder; a pooled report only rewrites its own files, so it may always reuse its folder
    if args.rescore and (args.pool or args.overwrite):
        raise ValueError("--rescore rewrites the report of the run in --out: leave out --pool and "
                         "--overwrite")
    with claim_run_folder(out, resume=args.resume or args.rescore or (bool(args.pool) and not args.overwrite),
                          overwrite=args.overwrite,
                          what="credit benchmark"):
        if args.rescore:
            return rescore(out)
        return pool(args) if args.pool else run_batch(args, out, on_stage or (lambda stage: None))


def rescore(out: Path) -> dict:
    """The report of a finished run written again from its score inputs, under its own header. Where the
    run keeps its batch.pkl, estimators registered since it ran are scored on that batch too (its truth
    and the estimates it has stay as they are) and added to score_inputs.npz."""
    import pickle
    from benchmarks.credit.aa_settings import cell_config
    from benchmarks.credit.advantage_report import COMMON_MODE
    from benchmarks.credit.score_inputs import ScoreInputs, add_estimators
    path = out / "score_inputs.npz"
    if not path.exists():
        raise FileNotFoundError(f"--rescore: {out} holds no score_inputs.npz; run that batch to the end "
                                "first")
    inputs, extra = ScoreInputs.load(path)
    if (out / "batch.pkl").exists() and (out / "manifest.json").exists():
        manifest = json.loads((out / "manifest.json").read_text())
        options = cell_config(manifest).estimator_kwargs()
        batch = pickle.loads((out / "batch.pkl").read_bytes())["ro"].batch
        added = add_estimators(inputs, batch, options, COMMON_MODE)
        if added:
            inputs.save(path, **extra)
            print(f"scored the estimators registered since the run on its batch.pkl: {', '.join(added)}")
    summary = out / "summary.md"
    header = (summary.read_text().split("\n\n")[0] if summary.exists()
              else f"Estimator advantages vs Monte-Carlo A, rescored from {path}.")
    own, common, table = report(inputs, out, header)
    print(table)
    return {"results": common, "own": own}


def run_batch(args, out: Path, on_stage) -> dict:
    from agents.trainer import Trainer
    from estimators import available_estimators
    from benchmarks.credit.advantage_report import COMMON_MODE, plot
    from benchmarks.credit.score_inputs import ScoreInputs, estimator_advantages
    from benchmarks.credit.manifest import check_manifest
    from benchmarks.credit.players import make_player
    from benchmarks.credit.policy_play import choose_goals
    from benchmarks.credit.user_estimator import load_user_estimator
    preset_cfg, cfg = settings(args)
    policy = default_policy(args, preset_cfg)
    # a larger K continues the truth: the continuations played stay valid draws, the rest are added
    check_manifest(out, manifest_settings(args, cfg, policy), list(KEPT), may_grow=("samples",))
    cfg = with_policy(cfg, policy, out / "policy")
    wall0 = time.perf_counter()
    trainer = Trainer(cfg)
    player = make_player(trainer, args.scripted, args.seed, args.chunk, args.workers)
    tasks = candidate_goals(args, trainer)
    on_stage("screen")
    if args.screen_repeats > 0:
        scr = player.screen(tasks, args.screen_repeats, out)
        goals, note = choose_goals(scr["by_task"], tasks, args.tasks, args.seed)
        note += (f" (screen success {100 * scr['eval_success']:.1f}% over {args.screen_repeats} "
                 "episode(s) each)")
        if scr.get("expert_timeouts"):
            note += f"; {scr['expert_timeouts']} screen episode(s) passed the expert's planner timeout"
    else:
        goals, note = tasks[:args.tasks], f"the first {min(args.tasks, len(tasks))} candidates (no screen)"
    print(note, flush=True)
    (out / "goals.json").write_text(json.dumps([str(g) for g in goals]))
    if len(goals) != cfg.batch_tasks:          # fewer usable goals than --tasks: a smaller batch
        trainer.cfg = cfg = dataclasses.replace(cfg, batch_tasks=len(goals))
    on_stage("batch")
    saved = player.record_batch(goals, out)
    ro = saved["ro"]
    won = float(ro.success.mean())
    print(f"batch: {len(goals)} goals x G={cfg.group_size}, {len(ro.batch)} rows, success {100 * won:.1f}%",
          flush=True)
    if saved["stats"].get("expert_timeouts"):
        note += f"; {saved['stats']['expert_timeouts']} batch episode(s) passed the expert's planner timeout"
    if args.finished_goals:
        from benchmarks.credit.mc_truth import leading_goals
        plan, store_name = truth_plan(saved, args.truth)
        saved, goals = leading_goals(saved, goals, args.samples, out / store_name, plan)
        note += (f"; scored on the first {len(goals)} goals, whose states all have K continuations "
                 "(--finished-goals: the run was stopped before the rest)")
        ro = saved["ro"]
        won = float(ro.success.mean())
    on_stage("truth")
    truth, halves, expert_adv, mc_s = ground_truth(trainer, player, saved, args.samples, out, args.truth,
                                                   not args.no_progress)
    if not np.any(truth.adv != 0):
        raise SystemExit("every MC advantage is zero (no continuation from any state won): the policy never "
                         "wins these goals, so no estimator has anything to be right about")
    on_stage("scores")
    names = args.estimators or available_estimators()
    names = list(names) + [load_user_estimator(spec) for spec in args.estimator]
    own = estimator_advantages(ro.batch, cfg.estimator_kwargs(), names)
    common = estimator_advantages(ro.batch, cfg.estimator_kwargs(), names, mode=COMMON_MODE)
    inputs = ScoreInputs.of(truth, ro.batch.group_id, expert_adv, own, common, halves)
    inputs.save(out / "score_inputs.npz", won=won)
    write_rows(out / "rows.csv", saved, truth, expert_adv, own)
    splits = "+".join(args.splits or [cfg.train_split])
    who = (f"scripted policy (the expert, eps {args.scripted.eps:g} random; {Path(cfg.model).name} embeds "
           "the prompts)" if args.scripted else f"policy {Path(policy).name}, T={cfg.temperature}")
    goals_of = (f"{args.ingredients or 'any'} ingredient goals of {splits}" if cfg.env == "textcraft"
                else f"goals of {splits}")
    setting = (f"{cfg.env} ({goals_of}), {who}: {len(goals)} goals x G={cfg.group_size} "
               f"({len(ro.batch)} rows, episode success {100 * won:.1f}%), K={args.samples} continuations "
               + ("per distinct (state, recorded action) stratum (the policy's probabilities as a control "
                  "variate)" if args.truth == "strata" else "per distinct state")
               + f", gamma {cfg.gamma}, seed {args.seed}")
    header = (f"Estimator advantages vs Monte-Carlo A = Q - V on the same real rollouts: {setting}. "
              f"{note}. Mean SE of A {truth.se.mean():.3f} (each state's variance shrunk toward the batch's "
              f"pooled one, mc_noise.pooled_se), mean |A| {np.abs(truth.adv).mean():.3f}. "
              f"Rows with |A| > 2 SE (sign column): {int(np.sum(np.abs(truth.adv) > 2 * truth.se))}.")
    scored_own, scored_common, table = report(inputs, out, header)
    plot(scored_own, own, truth.adv, truth.se, out / "accuracy.png", setting)
    wall = time.perf_counter() - wall0
    before = json.loads((out / "timing.json").read_text()) if (out / "timing.json").exists() else {}
    # totals over the calls that finished (a larger K continues a run: its first call's time counts too)
    timing = {**{k: v for k, v in saved["stats"].items() if k.endswith("_s")}, "mc_s_this_call": mc_s,
              "wall_s_this_call": wall,
              "mc_s_total": before.get("mc_s_total", before.get("mc_s_this_call", 0.0)) + mc_s,
              "wall_s_total": before.get("wall_s_total", before.get("wall_s_this_call", 0.0)) + wall}
    (out / "timing.json").write_text(json.dumps(timing))
    print(table)
    print(f"wrote {out}/rows.csv, scores.csv, pairs.csv, summary.md, accuracy.png; times {timing}")
    return {"results": scored_common, "own": scored_own, "truth": truth, "estimates": own, "success": won}


def pool(args) -> dict:
    """Several finished batches scored as one: goals and states stay apart, intervals over all goals."""
    from benchmarks.credit.score_inputs import ScoreInputs
    parts = []
    for run_dir in args.pool:
        path = Path(run_dir) / "score_inputs.npz"
        if not path.exists():
            raise FileNotFoundError(f"--pool {run_dir}: no score_inputs.npz there; run that batch to the end "
                                    "first")
        inputs, meta = ScoreInputs.load(path)
        parts.append({"inputs": inputs, "won": meta.get("won", float("nan"))})
    labels = [Path(r).name for r in args.pool]
    if len(set(labels)) != len(labels):
        labels = [str(r) for r in args.pool]
    inputs = ScoreInputs.pool([p["inputs"] for p in parts], labels)
    out = Path(args.out)
    (out / "parts.json").write_text(json.dumps([str(r) for r in args.pool]))     # the leaderboard reads it
    batches = ", ".join(f"{lab} ({len(set(p['inputs'].goal))} goals, {100 * p['won']:.1f}% won)"
                        for lab, p in zip(labels, parts))
    header = (f"Estimator advantages vs Monte-Carlo A, {len(parts)} batches pooled: {batches}; "
              f"{len(inputs.adv)} rows, {len(set(inputs.goal))} goals.")
    own, common, table = report(inputs, out, header)
    print(table)
    return {"results": common, "own": own}


def main(argv=None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except (ValueError, FileNotFoundError, ExpertCannotAct) as exc:   # ManifestMismatch, NonFiniteAdvantages
        print(f"advantage_accuracy: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
