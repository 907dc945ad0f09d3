"""ALFWorld env speed: our ALFWorldEnv against the raw engine driven directly, side by side.

    python -m benchmarks.env_speed alfworld [--games 12] [--steps 30] [--data-dir ../shared/data/alfworld]

Raw engine = what alfworld's own gym env runs: ``textworld.envs.PddlEnv`` with ``AlfredDemangler`` and
``AlfredInfos`` (admissible commands + won requested), a game loaded on every reset as textworld.gym does.
Both play the same action sequences (valid commands drawn from the admissible list with a fixed seed,
one in five an invalid string) on the same real games in lockstep, each step timed on both sides back to
back, so machine load hits both equally. Reported: mean reset and step time and ours/raw ratios (goal: step
overhead <= 5%).
"""
from __future__ import annotations

import os
import time

import numpy as np


def add_arguments(parser) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--data-dir", default=os.path.join(here, "..", "..", "shared", "data", "alfworld"))
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--games", type=int, default=12, help="games (spread over the split)")
    parser.add_argument("--steps", type=int, default=30, help="steps per game")
    parser.add_argument("--invalid-every", type=int, default=5,
                        help="every k-th action is nonsense (0: never)")


def _raw_engine():
    from bipace_envs.alfworld.engine import import_engine
    m = import_engine()
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    infos = m.textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile"])
    return AlfredInfos(AlfredDemangler(m.PddlEnv(infos), shuffle=False))


def _actions(env, task_id, steps, invalid_every, seed):
    rng = np.random.default_rng(seed)
    obs, info = env.reset(options={"task_id": task_id})
    out = []
    for i in range(steps):
        if invalid_every and i % invalid_every == invalid_every - 1:
            a = "fly to the moon"
        else:
            a = str(rng.choice(info["admissible_actions"]))
        obs, r, term, trunc, info = env.step(a)
        out.append(a)
        if term or trunc:
            break
    return out


def run(args) -> None:
    from bipace_envs.alfworld.env import ALFWorldEnv
    env = ALFWorldEnv(data_dir=args.data_dir, split=args.split, max_steps=10**6)
    raw = _raw_engine()
    picks = [env.task_ids[i] for i in np.linspace(0, len(env.task_ids) - 1, args.games).astype(int)]
    seqs = {t: _actions(env, t, args.steps, args.invalid_every, k) for k, t in enumerate(picks)}
    t_reset = {"ours": [], "raw": []}
    t_step = {"ours": [], "raw": []}
    t_step_valid = {"ours": [], "raw": []}

    def raw_reset(gamefile):
        raw.load(gamefile)
        raw.reset()

    # Each engine copy has its own Fast Downward library, so both can run the same game in lockstep:
    # every step is timed on both sides back to back (alternating who goes first), which cancels
    # machine-load drift out of the ratio.
    for k, tid in enumerate(picks):
        gamefile = env.gamefile(tid)
        sides = {"ours": (lambda: env.reset(options={"task_id": tid}), env.step),
                 "raw": (lambda: raw_reset(gamefile), raw.step)}
        order = ("ours", "raw") if k % 2 == 0 else ("raw", "ours")
        for who in order:
            t = time.perf_counter()
            sides[who][0]()
            t_reset[who].append(time.perf_counter() - t)
        for j, a in enumerate(seqs[tid]):
            for who in (order if j % 2 == 0 else order[::-1]):
                t = time.perf_counter()
                sides[who][1](a)
                dt = time.perf_counter() - t
                t_step[who].append(dt)
                if a != "fly to the moon":
                    t_step_valid[who].append(dt)
    n = len(t_step["ours"])
    print(f"ALFWorld env speed ({args.split}, {len(picks)} games, {n} steps each side, "
          f"1 in {args.invalid_every or 'never'} actions invalid)")
    print(f"{'':28s} {'ours':>10s} {'raw engine':>11s} {'ours/raw':>9s}")
    rows = [("reset (ms)", t_reset), ("step, all actions (ms)", t_step),
            ("step, valid actions (ms)", t_step_valid)]
    for name, d in rows:
        o, r = 1000 * float(np.mean(d["ours"])), 1000 * float(np.mean(d["raw"]))
        print(f"{name:28s} {o:10.1f} {r:11.1f} {o / r:9.3f}")
    o, r = float(np.median(t_step_valid["ours"])), float(np.median(t_step_valid["raw"]))
    print(f"{'step, valid, median (ms)':28s} {1000 * o:10.1f} {1000 * r:11.1f} {o / r:9.3f}")
    print("raw reset = load + reset (textworld.gym reloads the game file on every reset); "
          "ours = reset of a game already loaded in this worker.")


if __name__ == "__main__":     # the same as python -m benchmarks.env_speed alfworld
    import sys

    from benchmarks.env_speed import main
    main(["alfworld", *sys.argv[1:]])
