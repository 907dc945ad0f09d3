"""ALFWorld and WebShop on CPU: zero-shot, warm start and RL runs scored on held-out tasks, one table each.

    # hours on 2 cores
    python -m benchmarks.learning.env_table --preset alfworld-table --out runs/alfworld_table
    python -m benchmarks.learning.env_table --preset webshop-table --out runs/webshop_table
    # the table so far; runs nothing
    python -m benchmarks.learning.env_table --out runs/alfworld_table --report
    # warm start + its scores; then continue it
    python -m benchmarks.learning.env_table --preset alfworld-table --out runs/alfworld_table \\
        --stop-after evals
    python -m benchmarks.learning.env_table --out runs/alfworld_table --resume
    # what changed
    python -m benchmarks.learning.env_table --out runs/webshop_table --compare warm_start gigpo_seed0

Stages, each kept in ``--out`` when it finishes, so a rerun with ``--resume`` and the same ``--out`` continues
where a session stopped (one process at a time: a second one stops, naming the first) (a finished stage is
never redone; the warm start continues from its last SFT checkpoint, an RL run from its last iteration's
checkpoint, an evaluation from its last finished chunk of episodes):
1. warm start: LoRA SFT of the preset's model on the env expert's trajectories of the training tasks
   (``benchmarks.warm_start.build_warm_start``), merged into ``warm_start/``;
2. held-out scores of the warm start and of the untrained model (zero-shot) on every held-out set of
   the preset (``TABLES``: ALFWorld's real valid_seen and valid_unseen games, WebShop's held-out
   generated goals and the fixture's real products), fixed env and decoding seeds;
3. the screen (``--screen-repeats``, default 1): the warm start plays every training task; RL samples
   those it won at least once, where a group of G episodes can mix wins and losses;
4. RL runs, each estimator x seed from the warm start with a fresh LoRA (the preset's settings), then
   each run's final policy on every held-out set.
The report (``table.md``, ``results.json``, ``curves.png``): success with 95% Wilson intervals per
held-out set and per task type (ALFWorld), WebShop's mean score with its interval, each RL run's change
from the warm start paired episode by episode, training curves, and every stage's minutes.

Settings come from the preset (``agents/presets.py``) plus ``--set FIELD=VALUE``; the first call stores
them in ``table_settings.json`` and later calls use those (a different value is refused once anything
was measured with the stored ones: use another ``--out``).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchmarks.learning.train_table import evaluate_once, rl_seconds
from benchmarks.warm_start import build_warm_start, common_settings


def alfworld_task_type(task_id: str, env_kwargs: dict | None = None) -> str:
    """The ALFWorld task type of a task id (``bipace_envs.alfworld.games.task_type_of``; the id names it,
    so ``env_kwargs`` is not needed)."""
    from bipace_envs.alfworld.games import task_type_of
    return task_type_of(task_id)


def webshop_goal_options(task_id: str, env_kwargs: dict | None = None) -> str:
    """How many options a WebShop goal's purchase must choose (``0 options`` .. ``2 options``) in the
    catalogue ``env_kwargs`` makes: a policy that buys without clicking the options still scores on a
    goal without options and loses the 1.0 on the others, so this grouping shows that failure."""
    kwargs = dict(env_kwargs or {})
    if kwargs.get("data_dir"):          # a relative folder means another one from another directory
        kwargs["data_dir"] = str(Path(kwargs["data_dir"]).resolve())
    n = len(_webshop_goals(json.dumps(kwargs, sort_keys=True))[int(task_id)]["goal_options"])
    return f"{n} option{'' if n == 1 else 's'}"


@functools.lru_cache(maxsize=4)
def _webshop_goals(env_kwargs_json: str) -> list:
    import gymnasium as gym
    import bipace_envs  # noqa: F401  (registers the envs)
    # the goal list does not depend on the split; "test" is one every catalogue has (the fixture's 5 goals)
    env = gym.make("bipace/WebShop-v0", **({"split": "test"} | json.loads(env_kwargs_json)))
    try:
        return env.unwrapped.goals
    finally:
        env.close()


@dataclass(frozen=True)
class HeldOut:
    """One held-out set: a row label, the split, and gym.make kwargs over the preset's eval_env_kwargs."""
    name: str
    split: str
    env_kwargs: dict = field(default_factory=dict)
    repeats: int = 0            # episodes per task (0 = the config's eval_repeats): for sets of few tasks

    def env_kwargs_under(self, cfg) -> dict:
        """The gym.make kwargs this set is played with: the config's eval_env_kwargs, then the set's."""
        return json.loads(cfg.eval_env_kwargs) | self.env_kwargs


@dataclass(frozen=True)
class TableSpec:
    """What a preset's table scores on and how it groups tasks in the report."""
    held_out: tuple
    # (task id, the set's env kwargs) -> group label, for per-group tables of held-out sets and the screen
    group_of: Callable[[str, dict], str] | None = None
    group_label: str = "task type"                   # the per-group tables' first column
    report_score: bool = False                       # report the mean final score too (WebShop)
    screen_tasks: int = 0                            # the screen plays the first N training tasks (0 = all)
    pool_held_out: bool = False                      # also report every held-out set's episodes together


# the fixture's real products (raw schema, 3 products, 5 goals): not the reference files, so no hash check
WEBSHOP_FIXTURE_KWARGS = {"data_dir": "../shared/data/webshop-fixture", "verify_hashes": False}
TABLES: dict[str, TableSpec] = {
    "alfworld-table": TableSpec((HeldOut("valid_seen", "valid_seen"),
                                 HeldOut("valid_unseen", "valid_unseen")), group_of=alfworld_task_type,
                                pool_held_out=True),
    "webshop-table": TableSpec((HeldOut("test", "test"),
                                HeldOut("fixture", "test", WEBSHOP_FIXTURE_KWARGS, repeats=8)),
                               group_of=webshop_goal_options, group_label="goal",
                               report_score=True, screen_tasks=160),
}


# ------------------------------------------------------------------ settings
def load_settings(out: Path, preset: str | None, sets: list[str], ap) -> tuple[str, object]:
    """(preset name, TrainConfig): stored ones for an existing table, else the preset's, then ``--set``."""
    from agents.config import TrainConfig
    from agents.presets import get_preset, parse_sets, resolve_name
    path = out / "table_settings.json"
    try:
        if path.exists():
            stored = json.loads(path.read_text())
            if preset and resolve_name(preset) != stored["preset"]:
                ap.error(f"{out} holds a {stored['preset']} table; use another --out for {preset}")
            known = {f.name for f in dataclasses.fields(TrainConfig)}
            then = TrainConfig(**{k: v for k, v in stored["config"].items() if k in known})
            name, cfg = stored["preset"], dataclasses.replace(then, **parse_sets(sets))
            if cfg != then and any(out.glob("evals/*.json")):
                changed = {k: v for k, v in dataclasses.asdict(cfg).items() if stored["config"].get(k) != v}
                ap.error(f"{out} holds results measured with other settings; --set changes {changed}. "
                         "Use another --out")
        else:
            name = resolve_name(preset or "alfworld-table")
            cfg = get_preset(name, sets)
    except ValueError as exc:
        ap.error(f"settings: {exc}")
    if name not in TABLES:
        ap.error(f"preset {name!r} has no held-out sets here; env_table presets: {sorted(TABLES)}")
    return name, cfg


def save_settings(out: Path, name: str, cfg) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "table_settings.json").write_text(json.dumps({"preset": name, "config": dataclasses.asdict(cfg)},
                                                        indent=1))


# ------------------------------------------------------------------ evaluation
def eval_fields(cfg, held: HeldOut | None) -> dict:
    """TrainConfig fields of an evaluation on ``held`` (None: the training split, for the screen)."""
    fields = common_settings(cfg) | {"lora_layers": cfg.lora_layers, "lora_mlp": cfg.lora_mlp}
    if held is None:
        return fields | {"eval_split": cfg.train_split, "eval_env_kwargs": "{}", "eval_tasks": 0}
    return fields | {"eval_split": held.split, "eval_env_kwargs": json.dumps(held.env_kwargs_under(cfg)),
                     "eval_repeats": held.repeats or cfg.eval_repeats}


def evaluate_policy(path: Path, model: str, fields: dict, run_dir: Path | None = None) -> dict:
    """Scores of ``model`` (with ``run_dir``'s final LoRA adapter when given) under ``fields``, played once
    and kept in ``path`` (``train_table.evaluate_once``: a stopped evaluation continues from its chunks)."""
    return evaluate_once(path, model, path.parent / "scratch", fields, run_dir)


def score_policy(out: Path, spec: TableSpec, cfg, policy: str, model: str, run_dir: Path | None = None):
    """``policy``'s scores on every held-out set of ``spec`` (kept in ``out/evals``)."""
    for held in spec.held_out:
        t0 = time.perf_counter()
        path = out / "evals" / f"{policy}__{held.name}.json"
        ev = evaluate_policy(path, model, eval_fields(cfg, held), run_dir)
        print(f"{policy} on {held.name}: success {ev['eval_success']:.3f} of {ev['eval_n']}, score "
              f"{ev['eval_score']:.3f}, inadmissible answers {ev.get('eval_inadmissible', 0):.2f} "
              f"({ev['wall_s'] / 60:.1f} min; {time.perf_counter() - t0:.0f}s this call)", flush=True)


def screened_tasks(out: Path, cfg, warm: Path, repeats: int, first: int = 0) -> list | None:
    """Training tasks (the first ``first`` of the split; 0 = all) the warm start won at least once in
    ``repeats`` episodes each (None: no screen)."""
    if repeats < 1:
        return None
    from agents.envs import get_env_spec, split_env_factory
    fields = eval_fields(cfg, None) | {"eval_repeats": repeats, "eval_temperature": cfg.temperature,
                                       "eval_tasks": first}
    screen = evaluate_policy(out / "screen.json", str(warm), fields)
    won = {t for t, (w, _) in screen["by_task"].items() if w > 0}
    spec = get_env_spec(cfg.env)
    make = split_env_factory(spec, cfg.env_kwargs_dict(), cfg.train_split, cfg.max_steps or spec.max_steps)
    tasks = [t for t in spec.split_tasks(make, cfg.train_split) if str(t) in won]
    print(f"screen: the warm start won {len(tasks)} of {len(screen['by_task'])} training tasks at least once "
          f"in {repeats} episode(s) each ({screen['wall_s'] / 60:.1f} min)", flush=True)
    if not tasks:
        raise SystemExit("the warm start won no training task in the screen: train it longer (--set "
                         "sft_steps=..., sft_lr=...) or screen with more repeats (--screen-repeats)")
    return tasks


# ------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the table's folder (--resume continues it)")
    ap.add_argument("--preset", default=None,
                    help=f"one of {sorted(TABLES)} (default: the folder's, else alfworld-table)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any TrainConfig field (repeatable)")
    ap.add_argument("--seeds", type=int, nargs="+", help="RL seeds (default: the preset's)")
    ap.add_argument("--estimators", nargs="+", help="estimators (default: the preset's)")
    ap.add_argument("--screen-repeats", type=int, default=1,
                    help="warm-start episodes per training task in the screen (0 = RL samples every task)")
    ap.add_argument("--screen-tasks", type=int, default=None,
                    help="screen only the first N training tasks (0 = all; default: the table's own)")
    ap.add_argument("--stop-after", choices=("warm_start", "evals", "screen"),
                    help="stop after this stage (the rest continues on a later call)")
    ap.add_argument("--skip-zero-shot", action="store_true",
                    help="leave the untrained model's scores for a later call (its episodes run to the "
                         "horizon)")
    ap.add_argument("--report", action="store_true", help="only write and print the report")
    ap.add_argument("--resume", action="store_true",
                    help="continue the table --out holds (finished stages are kept)")
    ap.add_argument("--overwrite", action="store_true", help="empty --out first and start a new table")
    ap.add_argument("--compare", nargs=2, metavar=("POLICY_A", "POLICY_B"),
                    help="only print, per held-out set, the episodes two scored policies (warm_start, "
                         "zero_shot, <estimator>_seed<seed>) differ on and what each did there")
    return ap


def main(argv=None) -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # a table runs for hours, often with its output in a file: each progress line should reach it at once
    if hasattr(sys.stdout, "reconfigure"):     # notebooks' streams have none (and flush anyway)
        sys.stdout.reconfigure(line_buffering=True)
    ap = build_parser()
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.report or args.compare:         # read only: no claim on the folder
        return build_table(args, ap, out)
    from agents.run_folder import claim_or_exit
    with claim_or_exit(ap, out, resume=args.resume, overwrite=args.overwrite, what="env table"):
        return build_table(args, ap, out)


def build_table(args, ap, out: Path) -> None:
    name, cfg = load_settings(out, args.preset, args.set, ap)
    from agents.presets import PRESETS
    spec = TABLES[name]
    runs = [(est, seed) for seed in (args.seeds or PRESETS[name].seeds)
            for est in (args.estimators or PRESETS[name].estimators)]
    if (args.report or args.compare) and not (out / "table_settings.json").exists():
        ap.error(f"{out} holds no table yet (no table_settings.json there); build one first: "
                 f"python -m benchmarks.learning.env_table --preset {name} --out {out}")
    if args.report:
        print(report(out, spec, cfg, runs))
        return
    if args.compare:
        print(compare(out, spec, *args.compare, ap=ap))
        return
    import torch
    from agents.trainer import Trainer
    from benchmarks.learning.train_table import rl_config
    torch.set_num_threads(cfg.threads)
    save_settings(out, name, cfg)
    warm = out / "warm_start"
    times = json.loads((out / "times.json").read_text()) if (out / "times.json").exists() else {}
    if not (warm / "config.json").exists():
        times["warm_start_s"] = build_warm_start(cfg, warm)
        (out / "times.json").write_text(json.dumps(times))
    print(f"warm start ready ({times.get('warm_start_s', 0) / 60:.1f} min): {warm}", flush=True)
    if args.stop_after == "warm_start":
        return
    score_policy(out, spec, cfg, "warm_start", str(warm))
    if not args.skip_zero_shot:
        score_policy(out, spec, cfg, "zero_shot", cfg.model)
    if args.stop_after == "evals":
        print(report(out, spec, cfg, runs))
        return
    first = spec.screen_tasks if args.screen_tasks is None else args.screen_tasks
    tasks = screened_tasks(out, cfg, warm, args.screen_repeats, first)
    if args.stop_after == "screen":
        return
    for est, seed in runs:
        run_dir = out / f"{est}_seed{seed}"
        if not (run_dir / "summary.json").exists():
            # a run a session stopped continues from its last iteration's checkpoint (rl_config sets resume)
            rcfg = dataclasses.replace(rl_config(cfg, warm, est, seed, run_dir), eval_at_end=False)
            Trainer(rcfg, train_tasks=tasks).train()
        print(f"{est} seed {seed}: RL {rl_seconds(run_dir) / 60:.1f} min", flush=True)
        score_policy(out, spec, cfg, run_dir.name, str(warm), run_dir)
    print(report(out, spec, cfg, runs))


def compare(out: Path, spec: TableSpec, policy_a: str, policy_b: str, ap=None, limit: int = 20) -> str:
    """``benchmarks.learning.episode_diff`` of two policies' evaluations on every held-out set of the
    table."""
    from benchmarks.learning.episode_diff import format_diff
    blocks = []
    for held in spec.held_out:
        paths = [out / "evals" / f"{p}__{held.name}.json" for p in (policy_a, policy_b)]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            scored = sorted({p.name.split("__")[0] for p in out.glob("evals/*__*.json")})
            msg = f"no evaluation {missing} (policies scored in {out}: {scored or 'none yet'})"
            if ap is not None:
                ap.error(msg)
            raise FileNotFoundError(msg)
        a, b = (json.loads(p.read_text()) for p in paths)
        blocks.append(f"## {held.name}\n{format_diff(a, b, policy_a, policy_b, limit)}")
    return "\n\n".join(blocks)


def report(out: Path, spec: TableSpec, cfg, runs: list) -> str:
    from benchmarks.learning.env_table_report import write_report
    return write_report(out, spec, cfg, runs)


if __name__ == "__main__":
    main()
