"""BiGPO/BiPACE's cosine radius ``eps`` for a given policy: do its hidden states tell TextCraft states apart?

    python -m benchmarks.credit.eps_calibration                       # preset textcraft-table: SmolLM2-135M
    python -m benchmarks.credit.eps_calibration --set model=runs/table/warm_start --set group_size=8 \
        --set hidden_layer=-5

Settings: a preset of ``agents/presets.py`` (``--preset``) plus ``--set FIELD=VALUE`` (its batch,
prompts, model and ``hidden_layer``); ``--eps`` lists the radii compared.

Rolls out one batch (B tasks x G episodes, the trainer's collector, so the embedding is the one the
estimators get: the hidden state at ``hidden_layer``, last prompt token) and prints:
- cosine distances between rows of one group with the same GiGPO anchor (the same env state reached
  with different histories) and with different anchors (different states), as percentiles;
- step clusters per group at several eps against GiGPO's exact anchors per group, with the share of rows
  whose cluster holds other states too (merged) and whose state is spread over several clusters (split).
An eps below most different-state distances and above most same-state ones groups like the anchors
do; a larger one merges different states (their returns then share one baseline). A warm start's
folder is no preset: give it its preset's layer (-1 for smollm2-135m), or compare layers, one call each.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pair_distances(batch) -> tuple[np.ndarray, np.ndarray]:
    """Cosine distances of all within-group row pairs, split into same-anchor and different-anchor."""
    same, diff = [], []
    emb = batch.embedding / np.linalg.norm(batch.embedding, axis=1, keepdims=True)
    anchors = np.asarray([hash(a) for a in batch.anchor])
    for g in np.unique(batch.group_id):
        rows = np.flatnonzero(batch.group_id == g)
        d = 1.0 - emb[rows] @ emb[rows].T
        iu = np.triu_indices(len(rows), 1)
        eq = anchors[rows][:, None] == anchors[rows][None, :]
        same.append(d[iu][eq[iu]])
        diff.append(d[iu][~eq[iu]])
    return np.concatenate(same), np.concatenate(diff)


def cluster_agreement(anchor_codes: np.ndarray, cluster_codes: np.ndarray) -> tuple[float, float]:
    """Share of rows whose cluster holds more than one anchor (different states merged, so their returns
    share a baseline) and share of rows whose anchor is spread over more than one cluster (one state
    split, so its actions are not compared with each other). Both codes are dense per-row group codes
    that never cross rollout groups (``estimators.step_groups``)."""
    pairs = np.unique(np.stack([cluster_codes, anchor_codes], axis=1), axis=0)
    anchors_per_cluster = np.bincount(pairs[:, 0], minlength=int(cluster_codes.max()) + 1)
    clusters_per_anchor = np.bincount(pairs[:, 1], minlength=int(anchor_codes.max()) + 1)
    return (float(np.mean(anchors_per_cluster[cluster_codes] > 1)),
            float(np.mean(clusters_per_anchor[anchor_codes] > 1)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="textcraft-table",
                    help="the rollout's TrainConfig (agents/presets.py): B x G episodes, env, prompts")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="any TrainConfig field, e.g. --set model=runs/table/warm_start")
    ap.add_argument("--eps", type=float, nargs="+", default=[0.005, 0.01, 0.02, 0.05, 0.1])
    ap.add_argument("--out", default="/tmp/bipace-eps", help="scratch folder for the trainer's files")
    args = ap.parse_args(argv)

    import dataclasses

    from agents.presets import get_preset
    from agents.trainer import Trainer
    from benchmarks.credit.group_stats import group_stats, step_groups
    try:
        cfg = dataclasses.replace(get_preset(args.preset, args.set), out_dir=args.out, sft_steps=0,
                                  tensorboard=False, progress=False)
    except ValueError as exc:
        ap.error(str(exc))
    trainer = Trainer(cfg)
    ro, _ = trainer.rollout(1)
    batch = ro.batch
    same, diff = pair_distances(batch)
    q = [10, 50, 90]
    print(f"{cfg.model}: {len(batch.reward)} rows, {cfg.batch_tasks} groups, "
          f"success {ro.success.mean():.2f}, "
          f"hidden layer {trainer.collector('train').capture.layer}")
    print(f"cosine distance, same anchor ({len(same)} pairs): p10/p50/p90 = "
          + " / ".join(f"{v:.4f}" for v in np.percentile(same, q)) if len(same) else "no same-anchor pairs")
    print(f"cosine distance, different anchors ({len(diff)} pairs): p10/p50/p90 = "
          + " / ".join(f"{v:.4f}" for v in np.percentile(diff, q)) if len(diff)
          else "no different-anchor pairs")
    anchor_codes = step_groups(batch, "gigpo")
    anchors = group_stats(batch, anchor_codes)["clusters_per_group"]
    print(f"GiGPO exact anchors per group: {anchors:.1f}")
    print("| eps | clusters per group | different-anchor pairs closer than eps | rows in a cluster with "
          "other states | rows whose state is split |")
    print("|---|---|---|---|---|")
    for eps in args.eps:
        codes = step_groups(batch, "bigpo", eps=eps)
        clusters = group_stats(batch, codes)["clusters_per_group"]
        close = float(np.mean(diff < eps)) if len(diff) else float("nan")
        merged, split = cluster_agreement(anchor_codes, codes)
        print(f"| {eps} | {clusters:.1f} | {close:.3f} | {merged:.3f} | {split:.3f} |")


if __name__ == "__main__":
    main()
