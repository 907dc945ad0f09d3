"""Cost per training iteration of the HCAPO/RELACE hindsight scoring pass (``agents.hindsight``), next to
the rollout and the PPO update of the same iteration.

    python -m benchmarks.speed.hindsight_cost  # the compare preset: SmolLM2-135M, TextCraft, CPU
    python -m benchmarks.speed.hindsight_cost --preset tiny --set device=cuda --set batch_tasks=8 \
        --set group_size=8

Each iteration rolls out B tasks x G episodes with the trainer's collector, then times
- the pass as ``bipace-train`` runs it (rows of successful trajectories only, ``score_failures=False``),
- the pass over every row (``score_failures=True``: RELACE's optional failure scoring, and the cost the
  default pass reaches when every episode is won),
- one PPO update on the rows (GRPO advantages),
and prints the rows, tokens and seconds of each; overhead = pass seconds / (rollout + update seconds).
The pass's cost is one prefill-only forward per scored row, so its share falls as responses grow (the
rollout decodes them token by token) and rises with the success rate.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def one_iteration(trainer, it: int) -> dict:
    from dataclasses import replace

    from agents.hindsight import score_hindsight, settings_for
    from estimators import compute_advantages
    t0 = time.perf_counter()
    ro, rng = trainer.rollout(it)
    rollout_s = time.perf_counter() - t0
    settings = settings_for(trainer.cfg)
    sums, default = score_hindsight(trainer.model, trainer.tok, ro, settings)
    _, every = score_hindsight(trainer.model, trainer.tok, ro, replace(settings, score_failures=True))
    adv = compute_advantages(ro.batch, "grpo")
    t1 = time.perf_counter()
    trainer.update(ro, adv, rng)
    update_s = time.perf_counter() - t1
    base = rollout_s + update_s
    return {"rows": len(sums), "scored": default["hindsight_rows"], "rollout_s": rollout_s,
            "update_s": update_s,
            "pass_s": default["hindsight_s"], "pass_tokens": default["hindsight_tokens"],
            "all_s": every["hindsight_s"], "all_tokens": every["hindsight_tokens"],
            "overhead": default["hindsight_s"] / base, "overhead_all": every["hindsight_s"] / base}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="compare", help="the TrainConfig measured (agents/presets.py)")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="any TrainConfig field (repeatable), e.g. --set batch_tasks=8 --set device=cuda")
    p.add_argument("--iterations", type=int, default=2, help="timed iterations")
    p.add_argument("--warmup", type=int, default=1, help="untimed iterations first")
    args = p.parse_args(argv)

    import dataclasses
    from agents.presets import get_preset
    from agents.trainer import Trainer
    with tempfile.TemporaryDirectory() as out:
        # the measurement fixes: no warm start, no evaluation, GRPO's advantages for the update
        cfg = dataclasses.replace(get_preset(args.preset, args.set), estimator="grpo", out_dir=out,
                                  sft_steps=0, iterations=1, eval_every=0, eval_before=False,
                                  tensorboard=False, progress=False, capture_hidden=False)
        trainer = Trainer(cfg)
        for it in range(args.warmup):                     # allocations, first-call overheads
            one_iteration(trainer, 1000 + it)
        print(f"{cfg.model} on {cfg.device} ({cfg.dtype}), {cfg.env} (preset {args.preset}): "
              f"{cfg.batch_tasks} tasks x {cfg.group_size} episodes, <= {cfg.max_steps or 'the env default'} "
              f"steps, <= {cfg.max_new_tokens} new tokens")
        print(f"{'it':>3}{'rows':>6}{'scored':>8}{'rollout s':>11}{'update s':>10}{'pass s':>9}"
              f"{'overhead':>10}{'all-rows s':>12}{'overhead':>10}{'tokens/row':>12}", flush=True)
        runs = []
        for k in range(1, args.iterations + 1):
            r = one_iteration(trainer, k)
            runs.append(r)
            print(f"{k:>3}{r['rows']:>6}{r['scored']:>8}{r['rollout_s']:>11.2f}{r['update_s']:>10.2f}"
                  f"{r['pass_s']:>9.2f}{r['overhead']:>9.1%}{r['all_s']:>12.2f}{r['overhead_all']:>9.1%}"
                  f"{r['all_tokens'] / max(r['rows'], 1):>12.0f}", flush=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"median: pass {med['pass_s']:.2f} s ({med['overhead']:.1%} of rollout + update) on "
          f"{med['scored']:.0f} successful rows; every row {med['all_s']:.2f} s ({med['overhead_all']:.1%})")


if __name__ == "__main__":
    main()
