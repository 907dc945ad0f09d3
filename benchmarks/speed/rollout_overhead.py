"""Cost of recording BiGPO hidden states during rollouts: the same rollouts with and without the
capture hook, interleaved in one run (same tasks, seeds and sampling seeds, so the same tokens).

    python -m benchmarks.speed.rollout_overhead [--model tiny] [--envs 16] [--repeats 5] [--max-new-tokens 24]

BiPACE's paper spends 11.3% of a training step on an extra forward pass for the hidden states; ours
reads them from the prefill forward that ``generate`` runs anyway. Prints the rollout wall time and the
generation time of each variant (median over repeats) and the overhead of the capture in percent.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny", help="'tiny', hub id or local folder")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--envs", type=int, default=16, help="envs stepped together (B*G)")
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-steps", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=5, help="rollouts per variant (interleaved)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    import gymnasium as gym
    import numpy as np
    import torch
    import bipace_envs  # noqa: F401
    from bipace_envs.textcraft.tasks import list_tasks
    from agents.envs import get_env_spec
    from agents.models import load_policy
    from agents.prompts import PromptSettings, make_prompter
    from agents.rollout import RolloutCollector, RolloutSettings

    torch.set_num_threads(args.threads)
    model, tok = load_policy(args.model, args.dtype, args.device)
    spec = get_env_spec("textcraft")

    def make_env():
        return gym.make("bipace/TextCraft-v0", preset="agentgym", depths=(1, 2), max_steps=args.max_steps)
    tasks = list_tasks("agentgym", "train", (1, 2))
    ps = PromptSettings(require_think=args.model != "tiny", compact=args.model == "tiny")
    cols = {}
    for capture in (False, True):
        rs = RolloutSettings(max_steps=args.max_steps, max_new_tokens=args.max_new_tokens,
                             capture_hidden=capture, require_think=ps.require_think)
        cols[capture] = RolloutCollector(model, tok, make_env, args.envs, make_prompter("textcraft", ps), rs,
                                         spec.reward_map)
    g = args.group_size
    times = {False: [], True: []}
    gen = {False: [], True: []}
    for r in range(args.repeats + 1):                       # repeat 0 warms up both
        pick = np.random.default_rng(r).choice(len(tasks), args.envs // g)
        task_ids = [tasks[k] for k in np.repeat(pick, g)]
        responses = {}
        for capture in ((False, True) if r % 2 else (True, False)):
            torch.manual_seed(r)
            t0 = time.perf_counter()
            ro = cols[capture].collect(task_ids, np.repeat(np.arange(args.envs // g), g), np.repeat(pick, g))
            if r:
                times[capture].append(time.perf_counter() - t0)
                gen[capture].append(ro.gen_seconds)
            responses[capture] = ro.responses
            if capture:
                assert ro.batch.embedding is not None and len(ro.batch.embedding) == len(ro.batch.reward)
        # same seeds, same tokens: the capture must not change what the policy generates
        assert responses[True] == responses[False], "capture changed the generated responses"
    hook_s = cols[True].capture.seconds
    gen_total = sum(gen[True])
    for c in cols.values():
        c.close()
    mins = {k: min(v) for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    gmed = {k: statistics.median(v) for k, v in gen.items()}
    print(f"model={args.model} envs={args.envs} max_steps={args.max_steps} "
          f"max_new_tokens={args.max_new_tokens} "
          f"repeats={args.repeats}")
    print(f"{'variant':<22}{'rollout s (median)':>20}{'generate s (median)':>22}")
    print(f"{'without capture':<22}{med[False]:>20.3f}{gmed[False]:>22.3f}")
    print(f"{'with hidden capture':<22}{med[True]:>20.3f}{gmed[True]:>22.3f}")
    print(f"capture overhead: {100 * (med[True] / med[False] - 1):+.2f}% of rollout time "
          f"({100 * (gmed[True] / gmed[False] - 1):+.2f}% of generate time); "
          "paired per-repeat median: "
          f"{100 * statistics.median(t / f - 1 for t, f in zip(times[True], times[False])):+.2f}%")
    print(f"best-of-{args.repeats} rollout s: without {mins[False]:.3f}, with {mins[True]:.3f} "
          f"({100 * (mins[True] / mins[False] - 1):+.2f}%)")
    print(f"time spent capturing (hook + normalisation): {hook_s:.4f}s over all {args.repeats + 1} captured "
          "rollouts "
          f"= {100 * hook_s / (gen_total * (args.repeats + 1) / args.repeats):.3f}% of their generate time "
          "(the part of the difference that is not timing noise)")


if __name__ == "__main__":
    main()
