"""Environment speed: each env of ours against its reference engine, side by side in one run.

    python -m benchmarks.speed.env_speed textcraft [--episodes 300] [--preset adapt] [--repeats 3]
    python -m benchmarks.speed.env_speed webshop [--steps 100000] [--oracle-share 0.5]
    python -m benchmarks.speed.env_speed alfworld [--games 12] [--steps 30] \
        [--data-dir ../shared/data/alfworld]

One section per env, each an ``<env>_arguments(parser)`` and an ``<env>_run(args)``; ``ENV_BENCHMARKS`` is
the one place to add one. Each run imports its env's optional extras itself, so ``textcraft`` runs
without WebShop's or ALFWorld's. What each section measures: ``python -m benchmarks.speed.env_speed ENV
--help``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# ---------------- TextCraft

TEXTCRAFT_DOC = """TextCraft speed: our env against the reference ``textcraft`` 0.0.3, side by side.

    python -m benchmarks.speed.env_speed textcraft [--episodes 300] [--preset adapt] [--repeats 3]

Both play the same scripted episodes: reset with seed s (ours with the goal the reference picks
for s, which for the adapt preset is not ADaPT's recorded goal that ours plays), then four commands
that change nothing (a tag ingredient, a craftable ``get``, an unknown command, ``inventory``) and
the expert's plan, which ends the episode.
The scripts are computed before timing. Ours is timed through ``gym.make`` with all its
caches cleared first ("cold": every layout and admissible list computed anew) and again with
them filled ("warm", what GiGPO groups replaying one (task, seed) see). The reference is the
pinned adapter (spec load order, its recipe lists restored after each reset, which keeps it
from slowing down as its lists grow, so the comparison is in its favour).
"""
TEXTCRAFT_EXTRA = ("craft 4 stick using 2 planks", "get 1 stick", "dance", "inventory")


def textcraft_arguments(parser) -> None:
    parser.add_argument("--episodes", type=int, default=300, help="episodes (seeds 0..N-1) per pass")
    parser.add_argument("--preset", default="adapt", help="goal preset (adapt or agentgym)")
    parser.add_argument("--repeats", type=int, default=3, help="passes per env; the best is reported")


def _textcraft_clear_caches() -> None:
    from bipace_envs.textcraft import engine, env as tc_env, expert
    for fn in (engine.layout, engine.goal_tree, engine._use_lines, tc_env.useful_commands,
               tc_env._requirements, tc_env.executable_now, tc_env._expert,
               expert._graph, expert._estimate):
        fn.cache_clear()


def _textcraft_time(env, episodes, by_goal: bool = True) -> tuple[float, float, int]:
    """(seconds in reset, seconds in step, steps) for one pass; ``by_goal``: reset to the
    episode's goal (ours), else by seed alone (the reference)."""
    t_reset = t_step = 0.0
    steps = 0
    with contextlib.redirect_stdout(io.StringIO()):      # the reference prints while crafting
        for seed, goal, actions in episodes:
            t0 = time.perf_counter()
            if by_goal:
                env.reset(seed=seed, options={"task_id": goal})
            else:
                env.reset(seed=seed)
            t1 = time.perf_counter()
            for a in actions:
                env.step(a)
            t_step += time.perf_counter() - t1
            t_reset += t1 - t0
            steps += len(actions)
    return t_reset, t_step, steps


def textcraft_run(args) -> None:
    import gymnasium as gym

    import bipace_envs  # noqa: F401
    from bipace_envs.textcraft.reference import ReferenceTextCraft

    ours = gym.make("bipace/TextCraft-v0", preset=args.preset, max_steps=10**6)
    ref = ReferenceTextCraft(ordered_sets=False, restore_tables=True)
    episodes = []
    for seed in range(args.episodes):
        with contextlib.redirect_stdout(io.StringIO()):
            ref.reset(seed=seed)
        ours.reset(seed=seed, options={"task_id": ref.goal})
        plan = ours.unwrapped.expert_actions()
        # the failing commands first: a step after the winning plan would end nothing but the run
        episodes.append((seed, ref.goal, list(TEXTCRAFT_EXTRA) + plan))

    def best(make_pass):
        results = [make_pass() for _ in range(args.repeats)]
        return min(results, key=lambda r: r[0] + r[1])

    def cold():
        _textcraft_clear_caches()
        return _textcraft_time(ours, episodes)

    rows = {"ours (cold caches)": best(cold),
            "ours (warm caches)": best(lambda: _textcraft_time(ours, episodes)),
            "reference": best(lambda: _textcraft_time(ref, episodes, by_goal=False))}
    print(f"TextCraft, {args.episodes} episodes, {rows['reference'][2]} steps per pass, best of "
          f"{args.repeats}")
    print(f"{'env':<20}{'resets/s':>12}{'steps/s':>12}{'steps/s incl. resets':>24}")
    speeds = {}
    for name, (tr, ts, n) in rows.items():
        speeds[name] = (args.episodes / tr, n / ts, n / (tr + ts))
        print(f"{name:<20}{speeds[name][0]:>12,.0f}{speeds[name][1]:>12,.0f}{speeds[name][2]:>24,.0f}")
    ref_speed = speeds["reference"]
    for name in ("ours (cold caches)", "ours (warm caches)"):
        r = [a / b for a, b in zip(speeds[name], ref_speed)]
        print(f"ratio {name} / reference: resets {r[0]:.1f}x, steps {r[1]:.1f}x, incl. resets {r[2]:.1f}x")


# ---------------- WebShop

WEBSHOP_DOC = """WebShop env speed and memory: steps/s and resident memory after 1k and after N steps.

    python -m benchmarks.speed.env_speed webshop [--steps 100000] [--oracle-share 0.5]

Episodes alternate between the goal-buying oracle and a random policy over the admissible actions
(queries drawn from the instruction's words), so search, paging, item pages and buying are all
exercised. The reference engine (Java/pyserini/Flask) cannot be installed offline, so only our env
is timed; memory must stay flat (no growing histories).
"""


def webshop_arguments(parser) -> None:
    parser.add_argument("--steps", type=int, default=100_000, help="total env steps")
    parser.add_argument("--oracle-share", type=float, default=0.5, help="share of oracle episodes")
    parser.add_argument("--observation-mode", default="text", choices=["text", "text_rich"])
    parser.add_argument("--seed", type=int, default=0)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def webshop_run(args) -> None:
    import gymnasium as gym

    import bipace_envs  # noqa: F401
    from bipace_envs.webshop.oracle import oracle_action

    t0 = time.perf_counter()
    env = gym.make("bipace/WebShop-v0", observation_mode=args.observation_mode).unwrapped
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    gym.make("bipace/WebShop-v0", observation_mode=args.observation_mode)
    t_again = time.perf_counter() - t0
    print(f"gym.make: first {t_first:.2f} s (generate + index), again {t_again * 1000:.1f} ms (cached)")

    rng = random.Random(args.seed)
    obs, info = env.reset(seed=args.seed)
    oracle = rng.random() < args.oracle_share
    steps = episodes = wins = 0
    rss, t_1k = {}, None
    checkpoints = {1_000, 10_000, 100_000, args.steps}
    t0 = time.perf_counter()
    while steps < args.steps:
        if oracle:
            action = oracle_action(env)
        else:
            acts = info["admissible_actions"]
            action = rng.choice(acts) if acts else "noop"
            if action == "search[...]":
                words = info["instruction"].split()
                action = "search[" + " ".join(rng.sample(words, min(4, len(words)))) + "]"
        obs, r, term, trunc, info = env.step(action)
        steps += 1
        if steps in checkpoints:
            rss[steps] = _rss_mib()
            if steps == 1000:
                t_1k = time.perf_counter() - t0
        if term or trunc:
            episodes += 1
            wins += info["won"]
            obs, info = env.reset()
            oracle = rng.random() < args.oracle_share
    dt = time.perf_counter() - t0
    first = f" (first 1k: {1000 / t_1k:,.0f} steps/s)" if t_1k else ""
    print(f"steps: {steps:,} in {dt:.1f} s -> {steps / dt:,.0f} steps/s{first}; "
          f"episodes {episodes:,}, won {wins:,}")
    print("resident memory: " + ", ".join(f"after {k:,} steps {v:.1f} MiB" for k, v in sorted(rss.items())))


# ---------------- ALFWorld

ALFWORLD_DOC = """ALFWorld env speed: our ALFWorldEnv against the raw engine driven directly, side by side.

    python -m benchmarks.speed.env_speed alfworld [--games 12] [--steps 30] \
        [--data-dir ../shared/data/alfworld]

Raw engine = what alfworld's own gym env runs: ``textworld.envs.PddlEnv`` with ``AlfredDemangler`` and
``AlfredInfos`` (admissible commands + won requested), a game loaded on every reset as textworld.gym does.
Both play the same action sequences (valid commands drawn from the admissible list with a fixed seed,
one in five an invalid string) on the same real games in lockstep, each step timed on both sides back to
back, so machine load hits both equally. Reported: mean reset and step time and ours/raw ratios (goal: step
overhead <= 5%).
"""


def alfworld_arguments(parser) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--data-dir",
                        default=os.path.join(here, "..", "..", "..", "shared", "data", "alfworld"))
    parser.add_argument("--split", default="valid_unseen")
    parser.add_argument("--games", type=int, default=12, help="games (spread over the split)")
    parser.add_argument("--steps", type=int, default=30, help="steps per game")
    parser.add_argument("--invalid-every", type=int, default=5,
                        help="every k-th action is nonsense (0: never)")


def _alfworld_raw_engine():
    from bipace_envs.alfworld.engine import import_engine
    m = import_engine()
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    infos = m.textworld.EnvInfos(admissible_commands=True, won=True, extras=["gamefile"])
    return AlfredInfos(AlfredDemangler(m.PddlEnv(infos), shuffle=False))


def _alfworld_actions(env, task_id, steps, invalid_every, seed):
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


def alfworld_run(args) -> None:
    from bipace_envs.alfworld.env import ALFWorldEnv
    env = ALFWorldEnv(data_dir=args.data_dir, split=args.split, max_steps=10**6)
    raw = _alfworld_raw_engine()
    picks = [env.task_ids[i] for i in np.linspace(0, len(env.task_ids) - 1, args.games).astype(int)]
    seqs = {t: _alfworld_actions(env, t, args.steps, args.invalid_every, k) for k, t in enumerate(picks)}
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


# ---------------- dispatch


@dataclass(frozen=True)
class EnvBenchmark:
    """One env's speed benchmark: what it measures, its options and its run."""
    doc: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], None]


ENV_BENCHMARKS = {
    "textcraft": EnvBenchmark(TEXTCRAFT_DOC, textcraft_arguments, textcraft_run),
    "webshop": EnvBenchmark(WEBSHOP_DOC, webshop_arguments, webshop_run),
    "alfworld": EnvBenchmark(ALFWORLD_DOC, alfworld_arguments, alfworld_run),
}


def main(argv=None) -> None:
    # the env's own parser answers --help after the env's name, so the first one leaves -h alone
    parser = argparse.ArgumentParser(prog="python -m benchmarks.speed.env_speed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    parser.add_argument("env", nargs="?", choices=sorted(ENV_BENCHMARKS), help="the environment to benchmark")
    known, rest = parser.parse_known_args(argv)
    if known.env is None:
        parser.add_argument("-h", "--help", action="help", help="show this help message and exit")
        parser.parse_args(argv)
        parser.error(f"name the environment to benchmark: one of {', '.join(sorted(ENV_BENCHMARKS))}")
    bench = ENV_BENCHMARKS[known.env]
    env_parser = argparse.ArgumentParser(prog=f"python -m benchmarks.speed.env_speed {known.env}",
                                         description=bench.doc,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_arguments(env_parser)
    args = env_parser.parse_args(rest)
    args.env = known.env
    bench.run(args)


if __name__ == "__main__":
    main()
