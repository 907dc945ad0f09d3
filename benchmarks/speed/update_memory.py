"""Peak memory of one update micro-batch (the trainer's forward, reference forward and backward of the PPO
loss) with the LM head over the whole micro-batch's logits (``logits_chunk_tokens=0``, the path before
chunking) against the chunked head, each variant in a fresh process.

    python -m benchmarks.speed.update_memory --set lora_rank=64 --response-tokens 64       # SmolLM2 on CPU
    python -m benchmarks.speed.update_memory --preset qwen1.5b-alfworld --shape qwen2.5-1.5b \
        --prompt-tokens 700 --response-tokens 128                                   # on a GPU

Settings: a preset of ``agents/presets.py`` (``--preset``, default ``compare``) plus ``--set FIELD=VALUE``
give the model, dtype, device, gradient checkpointing, LoRA and the micro-batch's rows
(``micro_batch_rows``); ``--prompt-tokens``/``--response-tokens`` give each row's length. On CPU the figure
is the process's peak resident memory above what it held just before the micro-batch (``ru_maxrss``; one
process per variant, so the high-water mark is the micro-batch's own); on CUDA it is torch's peak
allocated memory above the same baseline. Rows are random tokens: memory depends on the shapes (rows x
prompt and response tokens x vocabulary), not on the text. Also prints each variant's seconds and checks
that both give the same loss.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(args, chunk_tokens: int) -> dict:
    """One micro-batch in this process; returns the peak memory above the baseline (MiB) and seconds."""
    import torch
    from agents.models import LoraSettings, add_lora, load_policy
    from agents.ppo import agg_loss, ppo_terms, response_logprobs
    from agents.presets import get_preset
    c = get_preset(args.preset, args.set)
    torch.set_num_threads(max(c.threads, 1))
    if args.shape:
        from benchmarks.speed.random_qwen import random_qwen
        model, tok = random_qwen(args.shape, c.dtype, c.device, args.tokenizer,
                                 gradient_checkpointing=c.gradient_checkpointing)
    else:
        model, tok = load_policy(c.model, c.dtype, c.device, c.gradient_checkpointing)
    model = add_lora(model, LoraSettings(rank=c.lora_rank, alpha=c.lora_alpha, mlp=c.lora_mlp,
                                         top_layers=c.lora_layers))
    model.train()
    args.rows, args.device, args.dtype = c.micro_batch_rows, c.device, c.dtype
    args.name = args.shape or c.model
    g = torch.Generator().manual_seed(0)
    vocab = model.get_base_model().config.vocab_size
    prompts = [torch.randint(10, vocab - 10, (args.prompt_tokens,), generator=g) for _ in range(args.rows)]
    responses = [torch.randint(10, vocab - 10, (args.response_tokens,), generator=g)
                 for _ in range(args.rows)]
    adv = torch.randn(args.rows, 1, generator=g).to(args.device)
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    else:
        base = _rss_mib()
    t0 = time.perf_counter()
    logp, ent, mask = response_logprobs(model, prompts, responses, tok.pad_token_id,
                                        chunk_tokens=chunk_tokens)
    ref = None
    if c.kl_coef > 0:
        with torch.no_grad(), model.disable_adapter():
            ref, _, _ = response_logprobs(model, prompts, responses, tok.pad_token_id, with_entropy=False,
                                          chunk_tokens=chunk_tokens)
    t = ppo_terms(logp, logp.detach(), adv.expand_as(logp), mask, ref)
    loss = agg_loss(t["pg"], mask) - c.entropy_coef * agg_loss(ent, mask)
    if ref is not None:
        loss = loss + c.kl_coef * agg_loss(t["kl"], mask)
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() / 2**20 - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base     # KiB on Linux
    return {"chunk_tokens": chunk_tokens, "peak_mib": peak, "s": time.perf_counter() - t0,
            "loss": float(loss), "logits_mib_per_copy": args.rows * args.response_tokens * vocab * 4 / 2**20,
            "name": args.name, "rows": args.rows, "device": args.device, "dtype": args.dtype}


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="compare", help="the TrainConfig measured (agents/presets.py)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any TrainConfig field (repeatable), e.g. --set micro_batch_rows=8")
    ap.add_argument("--shape", default=None, help="instead of the preset's model, a random Qwen2.5 shape "
                                                  "(benchmarks.speed.random_qwen)")
    ap.add_argument("--tokenizer", default=None, help="with --shape: a ChatML tokenizer folder")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--response-tokens", type=int, default=64)
    ap.add_argument("--chunks", type=int, nargs="+", default=[0, 1024, 256],
                    help="logits_chunk_tokens values to compare (0 = whole micro-batch's logits)")
    ap.add_argument("--only", type=int, default=None, help=argparse.SUPPRESS)   # one variant, in a child
    args = ap.parse_args(argv)
    from agents.gpu_memory import prefer_expandable_segments
    prefer_expandable_segments()         # as the trainer does, before the model takes GPU memory
    if args.only is not None:
        print(json.dumps(measure(args, args.only)))
        return []
    results = []
    for chunk in args.chunks:
        given = argv if argv is not None else sys.argv[1:]
        child = [sys.executable, "-m", "benchmarks.speed.update_memory", *given, "--only", str(chunk)]
        out = subprocess.run(child, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"variant chunk_tokens={chunk} failed:\n{out.stderr[-3000:]}")
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    r0 = results[0]
    print(f"{r0['name']} on {r0['device']} ({r0['dtype']}): one micro-batch of {r0['rows']} rows x "
          f"({args.prompt_tokens} prompt + {args.response_tokens} response tokens); float32 logits of its "
          f"responses: {r0['logits_mib_per_copy']:.0f} MiB per copy")
    for r in results:
        label = "whole micro-batch" if r["chunk_tokens"] == 0 else f"chunks of {r['chunk_tokens']} tokens"
        print(f"  LM head on {label:>22}: peak +{r['peak_mib']:8.0f} MiB, {r['s']:6.2f} s, "
              f"loss {r['loss']:.6f}")
    first = results[0]
    for r in results[1:]:
        ratio = r["peak_mib"] / max(first["peak_mib"], 1e-9)
        print(f"  chunk {r['chunk_tokens']} / whole: peak x{ratio:.2f}, "
              f"time x{r['s'] / first['s']:.2f}, loss difference {abs(r['loss'] - first['loss']):.2e}")
    return results


if __name__ == "__main__":
    main()
