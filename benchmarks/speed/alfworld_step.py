"""What does one ALFWorld step cost, with and without the engine's textgen memo?

    python -m benchmarks.speed.alfworld_step --episodes 6 --eps 0.2 --seed 0

Plays ``--episodes`` generated train games (task types in turn; generated into the usual cache on
first use) with an eps-random expert: the expert's action with probability 1 - eps, else a uniformly
random admissible one. Each episode is played twice, in two envs of their own: with TextWorld's
textgen memo off and on (``bipace_envs.alfworld.engine.textgen_memo``), interleaved per episode and
alternating which goes first, with the same seed, so both play the same actions. Times ``env.step``
only (the game's loading and reset are not counted; the expert's next action, which the env computes
inside ``step``, is, in both modes), and prints ms per step off and on, their ratio, and whether the
two played the same texts.
"""
from __future__ import annotations

import argparse
import random
import time


def play(env, task_id: str, seed: int, eps: float, memo: bool):
    """One eps-random expert episode: (texts seen, step seconds, steps)."""
    from bipace_envs.alfworld.engine import textgen_memo
    rng = random.Random(seed)
    with textgen_memo(memo):
        obs, info = env.reset(seed=seed, options={"task_id": task_id, "expert": True})
        texts, spent, done = [(obs, info["admissible_actions"])], 0.0, False
        while not done:
            expert = env.unwrapped.expert_action()
            if expert is None or rng.random() < eps:
                action = rng.choice(info["admissible_actions"])
            else:
                action = expert
            t = time.perf_counter()
            obs, reward, term, trunc, info = env.step(action)
            spent += time.perf_counter() - t
            texts.append((action, obs, info["admissible_actions"], reward, info["won"]))
            done = term or trunc
    return texts, spent, len(texts) - 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.speed.alfworld_step",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=6, help="episodes (generated train games) to play")
    ap.add_argument("--eps", type=float, default=0.2, help="probability of a random admissible action")
    ap.add_argument("--seed", type=int, default=0, help="seed of episode k is seed + k")
    ap.add_argument("--max-steps", type=int, default=50, help="step limit of an episode")
    ap.add_argument("--cache-dir", default=None, help="generated-game cache (default: the env's)")
    args = ap.parse_args(argv)
    if args.episodes < 1 or not 0.0 <= args.eps <= 1.0:
        ap.error("--episodes must be >= 1 and --eps within [0, 1]")

    import gymnasium as gym

    import bipace_envs  # noqa: F401  (registers bipace/ALFWorld-v0)
    from bipace_envs.alfworld.games import TASK_TYPES

    per_task = -(-args.episodes // len(TASK_TYPES))
    kwargs = dict(split="train", games_per_task=per_task, max_steps=args.max_steps, cache_dir=args.cache_dir)
    envs = {False: gym.make("bipace/ALFWorld-v0", **kwargs), True: gym.make("bipace/ALFWorld-v0", **kwargs)}
    ids = envs[False].unwrapped.task_ids  # per task type, games 0..per_task-1
    order = [ids[t * per_task + i] for i in range(per_task) for t in range(len(TASK_TYPES))][:args.episodes]

    total = {False: [0.0, 0], True: [0.0, 0]}
    same = True
    print(f"{'episode':<46} {'steps':>5} {'off ms':>8} {'on ms':>8} {'ratio':>6}")
    for k, task_id in enumerate(order):
        for memo in (False, True):
            envs[memo].unwrapped.gamefile(task_id)  # generate it now (untimed), if not cached yet
        runs = {}
        for memo in ((False, True) if k % 2 == 0 else (True, False)):
            runs[memo] = play(envs[memo], task_id, args.seed + k, args.eps, memo)
            total[memo][0] += runs[memo][1]
            total[memo][1] += runs[memo][2]
        same &= runs[False][0] == runs[True][0]
        off, on = (runs[m][1] / runs[m][2] * 1e3 for m in (False, True))
        print(f"{task_id:<46} {runs[False][2]:>5} {off:>8.1f} {on:>8.1f} {off / on:>6.2f}")
    off, on = (total[m][0] / total[m][1] * 1e3 for m in (False, True))
    print(f"all {total[False][1]} steps: memo off {off:.1f} ms/step, memo on {on:.1f} ms/step, "
          f"ratio off/on {off / on:.2f}; same texts, commands, rewards and wins: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
