"""What one warm-start (SFT) step costs: seconds and peak memory of a forward and backward pass on the same
batches of expert steps, with shared spines (the default), without, and with gradient checkpointing.

    python -m benchmarks.speed.sft_cost --preset webshop-table --tasks 30 --batches 6
    python -m benchmarks.speed.sft_cost --preset alfworld-table --tasks 8 --batches 4 --variants shared plain
    python -m benchmarks.speed.sft_cost --preset webshop-table --tasks 30 --batches 6 --paired --rounds 2

The batches are those ``agents.sft.sft`` draws with shared prefixes (a task's steps side by side, by
length): the expert's steps of ``--tasks`` training tasks, with the settings a table's warm start runs
with (``benchmarks.warm_start.warm_start_config``: the preset's prompts and model, LoRA on every
block), cut into batches of ``sft_batch``, ``--batches`` of them picked at random. Each variant runs
in its own process, so its peak RSS is its own; the mean loss is printed to show the variants computed
the same thing, and each batch's seconds beside the token positions its forward runs
(``agents.prefix.forward_tokens``; the shared variant runs the plain layout where sharing would not pay,
``agents.prefix.sharing_pays``). Separate processes run minutes apart, and one batch's time varied by 20%
from run to run on an idle 2-core VM: ``--paired`` times shared and plain back to back on each batch in
one process instead and prints their ratio with a 95% interval (no memory figures). On a shared machine,
prefix ``flock /tmp/heavy.lock``: the seconds mean nothing beside another heavy job.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

VARIANTS = {   # variant: (shared spines, gradient checkpointing)
    "shared": (True, False),
    "plain": (False, False),
    "checkpointed": (False, True),   # the trainer turns sharing off with checkpointing (agents.sft.run_sft)
}


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6     # KiB on Linux


def _setup(args, checkpointed: bool):
    """The table warm start's model (with its LoRA), tokenizer, expert steps and the picked batches."""
    import torch
    from agents.envs import get_env_spec, split_env_factory
    from agents.models import LoraSettings, add_lora, load_policy
    from agents.presets import get_preset
    from agents.prompts import make_prompter
    from agents.sft import expert_examples, sft_batches
    from benchmarks.warm_start import warm_start_config
    cfg = warm_start_config(get_preset(args.preset, args.set), "runs/sft_cost")
    torch.set_num_threads(cfg.threads or 1)
    torch.manual_seed(cfg.seed)
    spec = get_env_spec(cfg.env)
    steps = cfg.max_steps or spec.max_steps
    make_env = split_env_factory(spec, cfg.env_kwargs_dict(), cfg.train_split, steps)
    tasks = spec.split_tasks(make_env, cfg.train_split, limit=args.tasks)
    model, tok = load_policy(cfg.model, cfg.dtype, cfg.device, checkpointed)
    prompter = make_prompter(cfg.env, cfg.prompt_settings())
    examples = expert_examples(spec, make_env, tasks, prompter, tok, steps)
    batches = sft_batches(examples, cfg.sft_batch, share_prefix=True)
    picked = np.random.default_rng(args.seed).permutation(len(batches))[:args.batches]
    model = add_lora(model, LoraSettings(rank=cfg.lora_rank, alpha=cfg.lora_alpha, mlp=cfg.lora_mlp,
                                         top_layers=cfg.lora_layers))
    model.train()
    return model, tok, examples, [[examples[i] for i in batches[b]] for b in picked]


def _step(model, tok, drawn, share: bool) -> tuple[float, float, int]:
    """Seconds and loss of one forward and backward pass, and the token positions it ran (after the
    sharing rule, ``agents.prefix.tokens_run``)."""
    from agents.prefix import tokens_run
    from agents.sft import _ids, batch_keys, batch_loss
    keys = batch_keys(drawn) if share else None
    ran = tokens_run([_ids(tok, e.prompt) for e in drawn], [_ids(tok, e.response) for e in drawn],
                     tok.pad_token_id, keys=keys, episodes=keys)
    t0 = time.perf_counter()
    loss = batch_loss(model, tok, drawn, share)
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0, loss.item(), ran


def measure(args, variant: str) -> dict:
    """This process's figures for one variant (``--one``)."""
    from agents.sft import _ids
    share, checkpointed = VARIANTS[variant]
    model, tok, examples, drawn = _setup(args, checkpointed)
    before = peak_rss_gb()
    seconds, losses, tokens = map(list, zip(*[_step(model, tok, d, share) for d in drawn]))
    prompt_tokens = [len(_ids(tok, e.prompt)) for e in examples]
    return {"variant": variant, "examples": len(examples), "batches": len(drawn),
            "prompt_tokens_mean": float(np.mean(prompt_tokens)), "prompt_tokens_max": max(prompt_tokens),
            "seconds": seconds, "losses": losses, "tokens": tokens, "peak_rss_gb": peak_rss_gb(),
            "rss_before_gb": before,
            "checkpointing": bool(getattr(model.get_base_model(), "is_gradient_checkpointing", False))}


def paired(args) -> dict:
    """Shared and plain on each batch, ``--rounds`` times, in one process, which goes first alternating:
    each (batch, round) gives a shared / plain time ratio measured back to back, so machine drift between
    processes does not enter it. Returns every pair and the geometric mean ratio with its 95% interval."""
    from benchmarks.stats import mean_ci95
    model, tok, _, drawn = _setup(args, False)
    _step(model, tok, drawn[0], True)          # warm-up: the first pass of a process is slower
    pairs = []
    for r in range(args.rounds):
        for b, d in enumerate(drawn):
            first = (b + r) % 2 == 0
            a = _step(model, tok, d, first)
            z = _step(model, tok, d, not first)
            sh, pl = (a, z) if first else (z, a)
            pairs.append({"batch": b, "round": r, "shared_s": sh[0], "plain_s": pl[0],
                          "shared_tokens": sh[2], "plain_tokens": pl[2]})
    mean, half = mean_ci95(np.log([p["shared_s"] / p["plain_s"] for p in pairs]))
    return {"pairs": pairs, "ratio": float(np.exp(mean)),
            "ratio_ci": [float(np.exp(mean - half)), float(np.exp(mean + half))]}


def paired_table(res: dict) -> str:
    lines = [f"shared / plain time, back to back in one process: {res['ratio']:.2f}x "
             f"(95% CI {res['ratio_ci'][0]:.2f}-{res['ratio_ci'][1]:.2f}) over {len(res['pairs'])} pairs",
             f"{'batch':<6} {'shared s':>9} {'plain s':>8} {'ratio':>6} {'shared tok':>11} {'plain tok':>10}"]
    for b in sorted({p["batch"] for p in res["pairs"]}):
        ps = [p for p in res["pairs"] if p["batch"] == b]
        sh, pl = np.mean([p["shared_s"] for p in ps]), np.mean([p["plain_s"] for p in ps])
        lines.append(f"{b:<6} {sh:>9.1f} {pl:>8.1f} {sh / pl:>5.2f}x {ps[0]['shared_tokens']:>11} "
                     f"{ps[0]['plain_tokens']:>10}")
    return "\n".join(lines)


def run_variant(argv: list[str], variant: str) -> dict:
    """One variant in a fresh process (peak RSS is per process); its last stdout line is the JSON."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.speed.sft_cost", *argv, "--one", variant],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"variant {variant} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> str:
    base = statistics.mean(results[0]["seconds"])
    first = results[0]
    lines = [f"{first['examples']} expert steps (prompt tokens mean {first['prompt_tokens_mean']:.0f}, "
             f"max {first['prompt_tokens_max']}); {first['batches']} batches, the same in every variant",
             f"{'variant':<13} {'s/batch':>8} {'median':>7} {'vs ' + first['variant']:>10} "
             f"{'peak RSS GB':>12} {'mean loss':>10}"]
    for r in results:
        mean = statistics.mean(r["seconds"])
        lines.append(f"{r['variant']:<13} {mean:>8.1f} {statistics.median(r['seconds']):>7.1f} "
                     f"{mean / base:>9.2f}x {r['peak_rss_gb']:>12.2f} {statistics.mean(r['losses']):>10.4f}")
    lines += ["", "per batch: seconds (tokens the forward runs, padding included)",
              f"{'batch':<6}" + "".join(f" {r['variant']:>20}" for r in results)]
    for b in range(first["batches"]):
        lines.append(f"{b:<6}" + "".join(f" {r['seconds'][b]:>8.1f} ({r['tokens'][b]:>6} tok)"
                                         for r in results))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="webshop-table", help="a preset of agents/presets.py")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any TrainConfig field (repeatable)")
    ap.add_argument("--tasks", type=int, default=30,
                    help="training tasks whose expert episodes give the steps")
    ap.add_argument("--batches", type=int, default=6, help="batches timed per variant")
    ap.add_argument("--seed", type=int, default=1, help="which batches are picked")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--paired", action="store_true",
                    help="instead: shared and plain back to back on each batch in one process, --rounds "
                         "times (a ratio with its interval, no memory figures)")
    ap.add_argument("--rounds", type=int, default=2, help="with --paired: passes over the batches")
    ap.add_argument("--json", help="also write every variant's figures here")
    ap.add_argument("--one", choices=list(VARIANTS), help=argparse.SUPPRESS)   # a variant's own process
    return ap


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.tasks < 1 or args.batches < 1 or args.rounds < 1:
        raise SystemExit(f"--tasks, --batches and --rounds must be >= 1, got {args.tasks}, {args.batches} "
                         f"and {args.rounds}")
    if args.paired:
        res = paired(args)
        print(paired_table(res))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        return
    if args.one:
        print(json.dumps(measure(args, args.one)), flush=True)
        return
    results = []
    for v in args.variants:
        results.append(run_variant(argv, v))
        print(f"{v}: {statistics.mean(results[-1]['seconds']):.1f} s a batch, peak RSS "
              f"{results[-1]['peak_rss_gb']:.2f} GB", flush=True)
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
