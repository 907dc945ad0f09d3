"""What does one ALFWorld step cost, with and without the engine's memos (textgen parses, command texts)?

    python -m benchmarks.speed.alfworld_step --episodes 6 --eps 0.2 --seed 0

Plays ``--episodes`` generated train games (task types in turn; generated into the usual cache on
first use) with an eps-random expert: the expert's action with probability 1 - eps, else a uniformly
random admissible one. Each episode is played in three envs of their own, with the same seed, so all play
the same actions: ``off`` (no memo), ``textgen`` (TextWorld's textgen parses kept,
``bipace_envs.alfworld.engine.textgen_memo``) and ``both`` (command texts kept too, ``Engine.command_memo``),
interleaved per episode in a rotating order; ``replay`` then plays the episode's actions again in the
``both`` env, as a Monte-Carlo continuation replays its prefix. Times ``env.step`` only (the game's loading
and reset are not counted; the expert's next action, which the env computes inside ``step``, is, in every
mode), and prints ms per step per mode, the ratios, and whether all played the same texts.
"""
from __future__ import annotations

import argparse
import random
import time

MODES = ("off", "textgen", "both")


def play(env, task_id: str, seed: int, eps: float, textgen: bool, actions=None):
    """One eps-random expert episode (or ``actions`` replayed): (texts seen, step seconds, actions)."""
    from bipace_envs.alfworld.engine import textgen_memo
    rng = random.Random(seed)
    with textgen_memo(textgen):
        obs, info = env.reset(seed=seed, options={"task_id": task_id, "expert": True})
        texts, spent, taken, done = [(obs, info["admissible_actions"])], 0.0, [], False
        while not done:
            expert = env.unwrapped.expert_action()
            if actions is not None:
                action = actions[len(taken)]
            elif expert is None or rng.random() < eps:
                action = rng.choice(info["admissible_actions"])
            else:
                action = expert
            t = time.perf_counter()
            obs, reward, term, trunc, info = env.step(action)
            spent += time.perf_counter() - t
            taken.append(action)
            texts.append((action, obs, info["admissible_actions"], reward, info["won"], expert))
            done = term or trunc
    return texts, spent, taken


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
    envs = {m: gym.make("bipace/ALFWorld-v0", **kwargs) for m in MODES}
    envs["off"].unwrapped._get_engine().command_memo = False
    envs["textgen"].unwrapped._get_engine().command_memo = False
    ids = envs["off"].unwrapped.task_ids  # per task type, games 0..per_task-1
    order = [ids[t * per_task + i] for i in range(per_task) for t in range(len(TASK_TYPES))][:args.episodes]

    total = {m: [0.0, 0] for m in (*MODES, "replay")}
    same = True
    print(f"{'episode':<46} {'steps':>5} " + " ".join(f"{m + ' ms':>10}" for m in total))
    for k, task_id in enumerate(order):
        for env in envs.values():
            env.unwrapped.gamefile(task_id)  # generate it now (untimed), if not cached yet
        runs = {}
        for i in range(len(MODES)):
            m = MODES[(i + k) % len(MODES)]
            runs[m] = play(envs[m], task_id, args.seed + k, args.eps, m != "off")
        runs["replay"] = play(envs["both"], task_id, args.seed + k, args.eps, True, runs["both"][2])
        for m, (_, spent, taken) in runs.items():
            total[m][0] += spent
            total[m][1] += len(taken)
        same &= all(runs[m][0] == runs["off"][0] for m in runs)
        per_step = {m: runs[m][1] / len(runs[m][2]) * 1e3 for m in runs}
        print(f"{task_id:<46} {len(runs['off'][2]):>5} " + " ".join(f"{per_step[m]:>10.1f}" for m in runs))
    ms = {m: total[m][0] / total[m][1] * 1e3 for m in total}
    print(f"all {total['off'][1]} steps, ms/step: " + ", ".join(f"{m} {v:.1f}" for m, v in ms.items()))
    ratios = {"off/textgen": ms["off"] / ms["textgen"], "textgen/both": ms["textgen"] / ms["both"],
              "off/both": ms["off"] / ms["both"], "both/replay": ms["both"] / ms["replay"]}
    print("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()) + "; same texts, commands, "
          f"rewards, wins and expert actions: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
