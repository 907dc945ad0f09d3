"""Rollout and update speed of the offline policies, side by side in one run: tokens per second of a
TextCraft rollout (B tasks x G episodes through the trainer's collector) and of one PPO update on its
rows, for each model and each prompt/forward variant.

    python benchmarks/policy_speed.py                                  # smollm2-135m and tiny, 3 variants
    python benchmarks/policy_speed.py --models smollm2-135m --repeats 3 --tasks 4 --group-size 8
    python benchmarks/policy_speed.py --models smollm2-135m --variants compact+shared compact+shared,kl0 \
        compact+shared,top8                                            # what makes the update cheaper

Variants: ``verbose`` = verl-agent's full prompt template, every prompt run whole (the trainer before
compact prompts and prefix sharing); ``compact`` = the small-model template; ``compact+shared`` = that
template with each task's common prompt prefix run once (``agents/prefix.py``), in the rollout and in
the update; ``,kl0`` adds ``kl_coef=0`` (no adapter-free reference forward in the update) and
``,top8`` ``lora_layers=8`` (LoRA and the backward pass on the top 8 blocks only). Token rates count
every prompt and response token a plain forward would process, so a variant that skips work shows a
higher rate. Medians over ``--repeats`` interleaved repeats (the first round warms up and is not
counted). Time it on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

VARIANTS = {
    "verbose": dict(compact_prompts="no", share_prefix=False),
    "compact": dict(compact_prompts="yes", share_prefix=False),
    "compact+shared": dict(compact_prompts="yes", share_prefix=True),
    # cheaper updates, same rollout: no reference forward for the KL term; LoRA (and so the backward
    # pass) on the top 8 decoder blocks only
    "compact+shared,kl0": dict(compact_prompts="yes", share_prefix=True, kl_coef=0.0),
    "compact+shared,top8": dict(compact_prompts="yes", share_prefix=True, lora_layers=8),
}


def build(model: str, variant: str, args):
    from agents.config import TrainConfig
    from agents.trainer import Trainer
    cfg = TrainConfig(env="textcraft", model=model, out_dir=os.path.join(args.out, f"{model}-{variant}"),
                      env_kwargs='{"preset": "agentgym", "depths": [1, 2]}', max_steps=args.max_steps,
                      history_length=8, show_admissible=False, require_think="no", batch_tasks=args.tasks,
                      group_size=args.group_size, max_new_tokens=args.max_new_tokens, temperature=1.0,
                      mini_batch_rows=0, micro_batch_rows=args.micro_batch, threads=args.threads,
                      lora_rank=16, lora_alpha=32, tensorboard=False, progress=False, **VARIANTS[variant])
    return Trainer(cfg)


def measure(trainer, it: int) -> dict:
    import numpy as np
    t0 = time.perf_counter()
    ro, rng = trainer.rollout(it)
    t1 = time.perf_counter()
    adv = np.random.default_rng(it).choice([-1.0, 1.0], size=len(ro.response_ids))
    trainer.update(ro, adv, rng)
    t2 = time.perf_counter()
    tokens = sum(len(p) + len(r) for p, r in zip(ro.prompt_ids, ro.response_ids))
    return {"rows": len(ro.response_ids), "prompt_tokens": statistics.mean(len(p) for p in ro.prompt_ids),
            "rollout_s": t1 - t0, "update_s": t2 - t1, "rollout_tok_s": tokens / (t1 - t0),
            "update_tok_s": tokens / (t2 - t1)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "tiny"])
    ap.add_argument("--variants", nargs="+", default=["verbose", "compact", "compact+shared"],
                    choices=list(VARIANTS))
    ap.add_argument("--tasks", type=int, default=4, help="B: tasks per rollout")
    ap.add_argument("--group-size", type=int, default=8, help="G: episodes per task")
    ap.add_argument("--max-steps", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="/tmp/bipace-policy-speed",
                    help="scratch folder for the trainers' files")
    args = ap.parse_args(argv)

    results: dict = {}
    for model in args.models:
        trainers = {v: build(model, v, args) for v in args.variants}
        for rep in range(args.repeats + 1):             # round 0 warms up every variant
            for v, tr in trainers.items():
                m = measure(tr, rep + 1)
                if rep:
                    results.setdefault((model, v), []).append(m)
        del trainers

    print(f"\nTextCraft rollout of {args.tasks} tasks x G={args.group_size}, up to {args.max_steps} steps, "
          f"{args.max_new_tokens} new tokens; update = one PPO pass over its rows; {args.threads} threads; "
          f"median of {args.repeats}\n")
    print("| model | variant | rows | prompt tokens | rollout s | rollout tok/s | update s | update tok/s |")
    print("|---|---|---|---|---|---|---|---|")
    for (model, v), runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"| {model} | {v} | {med['rows']:.0f} | {med['prompt_tokens']:.0f} | {med['rollout_s']:.1f} | "
              f"{med['rollout_tok_s']:.0f} | {med['update_s']:.1f} | {med['update_tok_s']:.0f} |")
    for model in args.models:
        base, best = results.get((model, "verbose")), results.get((model, "compact+shared"))
        if base and best:
            speed = {k: statistics.median(r[k] for r in base) / statistics.median(r[k] for r in best)
                     for k in ("rollout_s", "update_s")}
            print(f"{model}: compact+shared vs verbose: rollout {speed['rollout_s']:.2f}x, "
                  f"update {speed['update_s']:.2f}x faster")
        for v in ("compact+shared,kl0", "compact+shared,top8"):
            cheap = results.get((model, v))
            if best and cheap:
                # per token: the variants' rows can differ once their updates have moved the policies apart
                ratio = (statistics.median(r["update_tok_s"] for r in cheap)
                         / statistics.median(r["update_tok_s"] for r in best))
                print(f"{model}: {v} vs compact+shared: update {ratio:.2f}x the tokens/s")


if __name__ == "__main__":
    main()
