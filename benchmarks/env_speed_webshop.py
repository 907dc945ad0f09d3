"""WebShop env speed and memory: steps/s and resident memory after 1k and after N steps.

    python -m benchmarks.env_speed webshop [--steps 100000] [--oracle-share 0.5]

Episodes alternate between the goal-buying oracle and a random policy over the admissible actions
(queries drawn from the instruction's words), so search, paging, item pages and buying are all
exercised. The reference engine (Java/pyserini/Flask) cannot be installed offline, so only our env
is timed; memory must stay flat (no growing histories).
"""
from __future__ import annotations

import os
import random
import time


def add_arguments(parser) -> None:
    parser.add_argument("--steps", type=int, default=100_000, help="total env steps")
    parser.add_argument("--oracle-share", type=float, default=0.5, help="share of oracle episodes")
    parser.add_argument("--observation-mode", default="text", choices=["text", "text_rich"])
    parser.add_argument("--seed", type=int, default=0)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(args) -> None:
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


if __name__ == "__main__":     # the same as python -m benchmarks.env_speed webshop
    import sys

    from benchmarks.env_speed import main
    main(["webshop", *sys.argv[1:]])
