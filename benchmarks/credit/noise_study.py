"""Which way of sampling the Monte-Carlo truth buys the most reliability per minute, measured on a recorded
scripted batch: plain continuations at growing K against the control-variate strata (``strata.py``).

    python -m benchmarks.credit.advantage_accuracy --cell webshop-eps0.5 --out runs/aa/ws05   # the batch
    python -m benchmarks.credit.noise_study --cell webshop-eps0.5 --out runs/aa/ws05 \\
        --plain 8 16 32 64 --strata 8 16 32 --study runs/noise/ws05

It reads ``batch.pkl`` of ``--out`` (the cell's flags must be the run's) and plays into ``--study`` (its
own stores: ``plain.jsonl``, ``strata.jsonl``; a rerun continues them), each method to each K in turn, so
the seconds of K are cumulative: what a run at that K costs in continuations. Each K is measured on the
first K continuations of every unit only, so a store filled further (or copied from the cell's own
``continuations.jsonl`` / ``strata.jsonl``) still measures each K as played; seconds are then only those
this call spent. Per setting: continuations
played, seconds, the reliability of A (unbiased from the per-state sample variances, and split-half with
Spearman-Brown; ``mc_noise``), and reliability gained per minute against the first plain K. Writes
``study.json`` and prints the table. Continuations run on ``--workers`` processes, as in the benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from pathlib import Path

from benchmarks.credit.aa_settings import build_parser, default_policy, settings, with_policy


class FirstK:
    """A view of a store holding only the first K continuations of every start (what a run at K played),
    so that a store filled to a larger K, or copied from a cell, measures each K on its own samples."""

    def __init__(self, store, k: int):
        self.samples = {key: recs[:k] for key, recs in store.samples.items()}

    def count(self, key: str) -> int:
        return len(self.samples.get(key, ()))


def plain_reliability(plan, store, reward, valid, gamma: float, penalty: float) -> tuple[float, float]:
    from benchmarks.credit.mc_noise import split_half_reliability, unbiased_reliability
    return (unbiased_reliability(plan, store, reward, valid, gamma, penalty),
            split_half_reliability(plan, store, reward, valid, gamma, penalty)[1])


def study(trainer, player, saved: dict, plain_ks: list, strata_ks: list, folder: Path, log=print) -> list:
    from benchmarks.credit.advantage_accuracy import truth_plan
    from benchmarks.credit.mc_truth import ContinuationStore, run_continuations
    from benchmarks.credit.strata import strata_reliability
    c, batch = trainer.cfg, saved["ro"].batch
    plans = {kind: truth_plan(saved, kind)[0] for kind in ("plain", "strata")}
    rows = []
    for method, ks in (("plain", plain_ks), ("strata", strata_ks)):
        plan, store = plans[method], ContinuationStore(folder / f"{method}.jsonl")
        seconds = 0.0
        timing = folder / f"{method}_seconds.json"
        known = json.loads(timing.read_text()) if timing.exists() else {}
        for k in sorted(ks):
            todo = sum(max(0, k - store.count(key)) for key in plan.keys)
            if todo:        # seconds are cumulative over K, as a run at that K would spend them
                t0 = time.perf_counter()
                play = player.continuations(plan, saved, todo)
                try:
                    run_continuations(plan, k, play, store, play.chunk, c.gamma, progress=False)
                finally:
                    play.close()
                seconds += time.perf_counter() - t0
                known[str(k)] = seconds
                timing.write_text(json.dumps(known))
            else:
                seconds = known.get(str(k), seconds)
            view = FirstK(store, k)
            if method == "plain":
                rel, sb = plain_reliability(plan, view, batch.reward, batch.action_valid, c.gamma,
                                            c.invalid_penalty)
            else:
                rel, sb = strata_reliability(plan, view, batch.reward, c.gamma)
            row = {"method": method, "K": k, "units": len(plan.keys),
                   "continuations": sum(min(k, store.count(key)) for key in plan.keys), "seconds": seconds,
                   "reliability": rel, "split_half": sb}
            rows.append(row)
            log(f"{method} K={k}: {row['continuations']} continuations, {seconds:.1f} s, reliability "
                f"{rel:.3f} (split-half {sb:.3f})")
    base = rows[0]
    for row in rows:
        extra_min = (row["seconds"] - base["seconds"]) / 60
        row["gain_per_min"] = ((row["reliability"] - base["reliability"]) / extra_min
                               if extra_min > 1e-9 else float("nan"))
    return rows


def table(rows: list) -> str:
    lines = ["| truth | K | units | continuations | seconds | reliability | split-half "
             "| gain per extra min |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['K']} | {r['units']} | {r['continuations']} | "
                     f"{r['seconds']:.1f} | {r['reliability']:.3f} | {r['split_half']:.3f} | "
                     f"{r['gain_per_min']:+.3f} |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = build_parser()
    p.prog = "python -m benchmarks.credit.noise_study"
    p.description = __doc__.split("\n\n")[0]
    p.add_argument("--plain", type=int, nargs="*", default=[8, 16, 32], help="K of plain continuations")
    p.add_argument("--strata", type=int, nargs="*", default=[8, 16], help="K per stratum")
    p.add_argument("--study", type=Path, required=True, help="folder of the study's stores and study.json")
    return p


def main(argv=None) -> list:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    args = parser().parse_args(argv)
    if min(args.plain + args.strata, default=2) < 4:
        raise SystemExit("noise_study: every K must be >= 4 (the split-half check needs two per half)")
    from agents.trainer import Trainer
    from benchmarks.credit.players import make_player
    preset_cfg, cfg = settings(args)
    if not args.scripted:
        raise SystemExit("noise_study: the strata need a scripted policy's exact action probabilities; pass "
                         "a scripted cell (--cell NAME or --policy scripted:EPS)")
    batch_file = Path(args.out) / "batch.pkl"
    if not batch_file.exists():
        raise SystemExit(f"noise_study: {batch_file} does not exist; record the batch first with "
                         "python -m benchmarks.credit.advantage_accuracy and the same flags")
    saved = pickle.loads(batch_file.read_bytes())
    trainer = Trainer(with_policy(cfg, default_policy(args, preset_cfg), Path(args.out) / "policy"))
    player = make_player(trainer, args.scripted, args.seed, args.chunk, args.workers)
    args.study.mkdir(parents=True, exist_ok=True)
    rows = study(trainer, player, saved, args.plain, args.strata, args.study)
    (args.study / "study.json").write_text(json.dumps({"cell": args.cell, "rows": rows}, indent=1))
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
