"""Rollout and update speed of the offline policies, side by side in one run: tokens per second of a
TextCraft rollout (B tasks x G episodes through the trainer's collector) and of one PPO update on its
rows, for each model and each prompt/forward variant.

    python -m benchmarks.speed.policy_speed  # smollm2-135m and tiny, 3 variants
    python -m benchmarks.speed.policy_speed --models smollm2-135m --repeats 3 --set batch_tasks=4 \
        --set group_size=8
    python -m benchmarks.speed.policy_speed --models smollm2-135m \
        --variants compact+shared compact+shared,kl0 \
        compact+shared,top8                                            # what makes the update cheaper

Settings: a preset of ``agents/presets.py`` (``--preset``, default ``compare``: TextCraft depth 1, 4 tasks
x G=4, 5 steps of up to 32 tokens) plus ``--set FIELD=VALUE``; each model of ``--models`` and each
variant replace their fields, and the update is one pass over the whole rollout (``mini_batch_rows=0``).

Variants: ``verbose`` = verl-agent's full prompt template, every prompt run whole (the trainer before
compact prompts and prefix sharing); ``compact`` = the small-model template; ``compact+shared`` = that
template with each task's common prompt prefix run once (``agents/prefix.py``), in the rollout and in
the update, each episode's history once per micro-batch of the update (mini-batches of whole episodes)
and each env's KV cache carried from one rollout step to the next. Modifiers: ``,kl0`` adds
``kl_coef=0`` (no adapter-free reference forward in the update), ``,topN`` (any N, e.g. ``,top8``)
``lora_layers=N`` (LoRA and the backward pass on the top N blocks only), ``,rows`` shuffles rows, not
episodes, into mini-batches (no history sharing in the update) and ``,nocarry`` runs every rollout prompt
afresh; a variant with modifiers is compared with the first variant given. Token rates count every prompt
and response token a plain forward would process, so a variant that skips work shows a higher rate.
``drift`` is how far the update moved the policy on the rows it trained (mean |log-ratio| per token
over ``--drift-rows`` rows): fewer adapted blocks move it less at the same learning rate (``--lr``),
which a faster update has to make up. Medians over ``--repeats`` interleaved repeats (the first round
warms up and is not counted). Time it on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

VARIANTS = {
    "verbose": dict(compact_prompts="no", share_prefix=False),
    "compact": dict(compact_prompts="yes", share_prefix=False),
    "compact+shared": dict(compact_prompts="yes", share_prefix=True),
}

MODIFIERS = {
    "kl0": dict(kl_coef=0.0),                 # no adapter-free reference forward for the KL term
    "rows": dict(minibatch_unit="row"),       # row mini-batches: no episode history shared in the update
    "nocarry": dict(carry_cache=False),       # every rollout prompt runs afresh (its task prefix shared)
}


def variant_settings(name: str) -> dict:
    """TrainConfig fields of a variant: a base of ``VARIANTS`` plus modifiers (``,topN``: LoRA, and so the
    backward pass, on the top N decoder blocks only; the others in ``MODIFIERS``)."""
    base, *mods = name.split(",")
    if base not in VARIANTS:
        raise argparse.ArgumentTypeError(f"variant {name!r}: the base must be one of {list(VARIANTS)}")
    out = dict(VARIANTS[base])
    for m in mods:
        if m.startswith("top") and m[3:].isdigit() and int(m[3:]) > 0:
            out["lora_layers"] = int(m[3:])
        elif m in MODIFIERS:
            out.update(MODIFIERS[m])
        else:
            raise argparse.ArgumentTypeError(f"variant {name!r}: unknown modifier {m!r} "
                                             f"(topN or one of {list(MODIFIERS)})")
    return out


def variant(name: str) -> str:
    variant_settings(name)      # argparse type: refuse a bad name before any model loads
    return name


def base_config(args):
    """The preset's config plus ``--set``, with what the measurement fixes: one update pass over every row,
    drift measured outside the timer, no logs."""
    import dataclasses
    from agents.presets import get_preset
    cfg = get_preset(args.preset, args.set)
    return dataclasses.replace(cfg, mini_batch_rows=0, drift_rows=0, tensorboard=False, progress=False,
                               sft_steps=0, eval_before=False)


def build(model: str, variant: str, args):
    import dataclasses
    from agents.trainer import Trainer
    folder = os.path.join(args.out, f"{model}-{variant}")
    cfg = dataclasses.replace(base_config(args), model=model, out_dir=folder, **variant_settings(variant))
    return Trainer(cfg)


def measure(trainer, it: int, drift_rows: int) -> dict:
    import numpy as np
    t0 = time.perf_counter()
    ro, rng = trainer.rollout(it)
    t1 = time.perf_counter()
    adv = np.random.default_rng(it).choice([-1.0, 1.0], size=len(ro.response_ids))
    trainer.update(ro, adv, rng)
    t2 = time.perf_counter()
    # after the timer: the update's own drift option would be timed with it
    trained = np.flatnonzero([len(r) > 0 for r in ro.response_ids])[:drift_rows]
    drift = trainer._drift(ro, trained, trainer._old_logprobs(ro)) if drift_rows else float("nan")
    tokens = sum(len(p) + len(r) for p, r in zip(ro.prompt_ids, ro.response_ids))
    return {"rows": len(ro.response_ids), "prompt_tokens": statistics.mean(len(p) for p in ro.prompt_ids),
            "rollout_s": t1 - t0, "update_s": t2 - t1, "rollout_tok_s": tokens / (t1 - t0),
            "update_tok_s": tokens / (t2 - t1), "drift": drift}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "tiny"])
    ap.add_argument("--variants", nargs="+", default=["verbose", "compact", "compact+shared"], type=variant,
                    help=f"a base ({', '.join(VARIANTS)}) with optional modifiers ,topN and "
                         f"{', '.join(',' + m for m in MODIFIERS)}")
    ap.add_argument("--preset", default="compare", help="the TrainConfig measured (agents/presets.py)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any TrainConfig field (repeatable), e.g. --set batch_tasks=2 --set lr=1e-3")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--drift-rows", type=int, default=32,
                    help="rows whose log-ratio after the update gives 'drift' (not timed: it runs after)")
    ap.add_argument("--out", default="/tmp/bipace-policy-speed",
                    help="scratch folder for the trainers' files")
    args = ap.parse_args(argv)
    try:
        c = base_config(args)
    except ValueError as exc:
        ap.error(str(exc))

    results: dict = {}
    for model in args.models:
        trainers = {v: build(model, v, args) for v in args.variants}
        for rep in range(args.repeats + 1):             # round 0 warms up every variant
            for v, tr in trainers.items():
                m = measure(tr, rep + 1, args.drift_rows)
                if rep:
                    results.setdefault((model, v), []).append(m)
        del trainers

    print(f"\n{c.env} rollout of {c.batch_tasks} tasks x G={c.group_size}, up to {c.max_steps} steps, "
          f"{c.max_new_tokens} new tokens (preset {args.preset}); update = one PPO pass over its rows; "
          f"{c.threads} threads; median of {args.repeats}\n")
    print("| model | variant | rows | prompt tokens | rollout s | rollout tok/s | update s | update tok/s "
          "| drift |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (model, v), runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"| {model} | {v} | {med['rows']:.0f} | {med['prompt_tokens']:.0f} | {med['rollout_s']:.1f} | "
              f"{med['rollout_tok_s']:.0f} | {med['update_s']:.1f} | {med['update_tok_s']:.0f} | "
              f"{med['drift']:.4f} |")
    for model in args.models:
        base, best = results.get((model, "verbose")), results.get((model, "compact+shared"))
        if base and best:
            speed = {k: statistics.median(r[k] for r in base) / statistics.median(r[k] for r in best)
                     for k in ("rollout_s", "update_s")}
            print(f"{model}: compact+shared vs verbose: rollout {speed['rollout_s']:.2f}x, "
                  f"update {speed['update_s']:.2f}x faster")
        first = args.variants[0]
        for v in args.variants[1:]:
            if "," in v:        # against the first variant, which is timed beside it
                # per token: the variants' rows can differ once their updates have moved the policies apart
                ratio = {k: statistics.median(r[k] for r in results[(model, v)])
                         / statistics.median(r[k] for r in results[(model, first)])
                         for k in ("rollout_tok_s", "update_tok_s")}
                print(f"{model}: {v} vs {first}: rollout {ratio['rollout_tok_s']:.2f}x, "
                      f"update {ratio['update_tok_s']:.2f}x the tokens/s")


if __name__ == "__main__":
    main()
