"""What carrying KV caches between steps saves on long multi-turn prompts: the expert's episodes of an env
preset (WebShop or ALFWorld: every step's prompt extends the last) replayed through the rollout
collector's ``generate``, step by step, in three variants side by side in one run:

- ``afresh``: every prompt runs whole (each task's common prefix once, ``agents.prefix``);
- ``masked``: each env's cache is carried to its next step and the columns the step does not reuse
  (the old instruction tail, the answer, padding) are masked out, until the cache is twice the prompt;
- ``compact``: carried, and those columns are dropped (``RolloutSettings.compact_cache``, the default).

    python -m benchmarks.speed.carried_cache                         # webshop-table, 40 test goals: 45 min
    python -m benchmarks.speed.carried_cache --preset alfworld-table --episodes 12       # 143 steps: 18 min
    # shorter answers: the prompt weighs more
    python -m benchmarks.speed.carried_cache --set max_new_tokens=16

The prompts are the expert's, so every variant sees the same prompts whatever the model answers; answers
are greedy with the preset's ``max_new_tokens`` (an untrained model's answers, only their length counts).
Prints per variant the median seconds of the whole replay over ``--repeats`` interleaved repeats (the
first round warms up and is not counted), the mean width of the cache a step hands to the next (what
its answer's last token attended to) and its ratio to the prompt length. Time it on an idle machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

VARIANTS = {"afresh": dict(carry_cache=False), "masked": dict(carry_cache=True, compact_cache=False),
            "compact": dict(carry_cache=True, compact_cache=True)}


def expert_episodes(cfg, tokenizer, n: int) -> tuple[list[list], object]:
    """The expert's prompts of the first ``n`` held-out tasks of ``cfg`` (one list of steps per episode) and
    the env maker."""
    from agents.envs import get_env_spec, split_env_factory
    from agents.prompts import make_prompter
    from agents.sft import expert_examples
    spec = get_env_spec(cfg.env)
    make_env = split_env_factory(spec, cfg.env_kwargs_dict(held_out=True), cfg.eval_split, cfg.max_steps)
    tasks = spec.split_tasks(make_env, cfg.eval_split, limit=n)
    prompter = make_prompter(cfg.env, cfg.prompt_settings())
    examples = expert_examples(spec, make_env, tasks, prompter, tokenizer, cfg.max_steps)
    episodes: dict = {}
    for ex in examples:
        episodes.setdefault(ex.key, []).append(ex)
    return list(episodes.values()), make_env


def replay(collector, episodes: list[list]) -> dict:
    """Every episode's prompts, step t of all episodes that have one in one ``generate``; the carried cache
    (when the collector keeps one) goes from each step to the next."""
    t0, carried, widths, prompts, answers = time.perf_counter(), None, [], [], 0
    for t in range(max(map(len, episodes))):
        envs = [e for e, ep in enumerate(episodes) if len(ep) > t]
        if carried is not None:
            widths.append(carried.width())
        p_ids, r_ids, _, _, _, carried = collector.generate([episodes[e][t].prompt for e in envs],
                                                            [episodes[e][t].key for e in envs], carried, envs)
        prompts.append(statistics.fmean(map(len, p_ids)))
        answers += sum(map(len, r_ids))
    return dict(seconds=time.perf_counter() - t0, width=statistics.fmean(widths) if widths else 0.0,
                prompt=statistics.fmean(prompts), answer_tokens=answers)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="webshop-table", help="a preset of agents/presets.py")
    ap.add_argument("--episodes", type=int, default=40, help="held-out tasks replayed together (one batch)")
    ap.add_argument("--repeats", type=int, default=1, help="replays per variant, interleaved")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a TrainConfig field of the preset (repeatable)")
    args = ap.parse_args(argv)
    if args.episodes < 1 or args.repeats < 1:
        ap.error("--episodes and --repeats must be at least 1")

    import torch
    from agents.models import load_policy
    from agents.presets import get_preset
    from agents.prompts import make_prompter
    from agents.rollout import RolloutCollector, RolloutSettings

    cfg = get_preset(args.preset, args.set)
    torch.set_num_threads(cfg.threads or 1)
    model, tok = load_policy(cfg.model, cfg.dtype, cfg.device)
    episodes, make_env = expert_episodes(cfg, tok, args.episodes)
    steps = sum(map(len, episodes))
    print(f"{args.preset}: {len(episodes)} expert episodes, {steps} steps, {cfg.model}, "
          f"{cfg.max_new_tokens} answer tokens at most, {torch.get_num_threads()} threads")
    prompter = make_prompter(cfg.env, cfg.prompt_settings())
    runs: dict = {v: [] for v in args.variants}
    for r in range(args.repeats + 1):
        for v in args.variants:
            rs = RolloutSettings(max_steps=cfg.max_steps, max_new_tokens=cfg.max_new_tokens, do_sample=False,
                                 capture_hidden=False, logprobs=False, require_think=False, **VARIANTS[v])
            collector = RolloutCollector(model, tok, make_env, 1, prompter, rs, None)
            out = replay(collector, episodes)
            collector.close()
            print(f"round {r} {v}: {out['seconds']:.1f} s" + (" (warm-up)" if r == 0 else ""), flush=True)
            if r:                                   # round 0 warms up
                runs[v].append(out)
    base = statistics.median(x["seconds"] for x in runs[args.variants[0]])
    print(f"{'variant':<8} {'seconds':>8} {'vs ' + args.variants[0]:>10} {'cache width':>12} "
          f"{'prompt':>7} {'width/prompt':>13} {'answer tokens':>14}")
    for v, xs in runs.items():
        sec = statistics.median(x["seconds"] for x in xs)
        width, prompt = xs[0]["width"], xs[0]["prompt"]
        print(f"{v:<8} {sec:8.1f} {base / sec:9.2f}x {width:12.0f} {prompt:7.0f} "
              f"{width / prompt if width else 0:13.2f} {xs[0]['answer_tokens']:14d}")


if __name__ == "__main__":
    main()
