"""Does a more accurate advantage point the update the right way? Each estimator's policy gradient against
the Monte-Carlo one, over the RL LoRA parameters of the policy that played the batch.

    python -m benchmarks.credit.gradient_alignment \
        --cell textcraft-smollm2=runs/cells/smollm2-aa_tc_2plus,runs/cells/smollm2-aa_tc_2plus_b \
        --out docs/results/credit-to-learning

For every row i of the batch folders (``advantage_accuracy.py``'s, played by a model policy whose folder the
manifest names and fingerprints) it takes g_i = d log pi(a_i | s_i) / d theta once, theta the LoRA adapter
the trainer puts on that policy for RL (the preset's rank, alpha and blocks, initialised from the config's
seed, as ``agents.trainer.Trainer`` does; its B matrices start at zero, so only they get a gradient), and
keeps the N x P matrix G. Each estimator's gradient is then one product, g_est = A_est^T G (the trainer's
own normalisation), and the truth's g_MC = A^T G. Written to ``--out/<cell>/alignment.csv``: cos(g_est,
g_MC) with a jackknife-t interval over goals, and the paired difference against gigpo.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_ESTIMATORS = ("grpo", "gigpo", "pace", "bigpo", "bipace", "ecpo", "reinforce_pp", "gigpo_goal",
                      "pace_goal")
BASELINE = "gigpo"


class PolicyMismatch(ValueError):
    """The batch's manifest names another policy than the folder holds now."""


def policy_of(folders: list[Path]) -> tuple[str, dict]:
    """The policy folder the batches were played by, checked against each manifest's fingerprint."""
    from benchmarks.credit.manifest import fingerprint
    policies = set()
    manifest = {}
    for folder in folders:
        manifest = json.loads((Path(folder) / "manifest.json").read_text())
        policy = manifest.get("policy", "")
        if policy.startswith("scripted:") or not Path(policy).exists():
            raise PolicyMismatch(f"{folder}: its policy {policy!r} is not a model folder on this machine; "
                                 "the gradient needs the policy that played (rebuild it, e.g. the TextCraft "
                                 "warm start with `python -m benchmarks.credit.advantage_accuracy --cell "
                                 "textcraft-smollm2`)")
        now = fingerprint(policy)
        if now != manifest.get("policy_sha1"):
            raise PolicyMismatch(f"{folder}: the policy at {policy} has fingerprint {now[:12]}, the batch "
                                 f"was played by {str(manifest.get('policy_sha1'))[:12]}; its weights "
                                 "differ, so its gradient is not the one of the batch's policy")
        policies.add(policy)
    if len(policies) > 1:
        raise PolicyMismatch(f"the batches were played by different policies: {sorted(policies)}")
    return policies.pop(), manifest


def rl_adapter(policy: str, cfg):
    """``policy`` with the RL LoRA adapter the trainer adds (``Trainer._set_up``): seed, rank, blocks."""
    import torch
    from agents.models import LoraSettings, add_lora, load_policy
    model, tok = load_policy(policy, "float32", "cpu")
    torch.manual_seed(cfg.seed)
    model = add_lora(model, LoraSettings(rank=cfg.lora_rank, alpha=cfg.lora_alpha, mlp=cfg.lora_mlp,
                                         top_layers=cfg.lora_layers))
    return model, tok


def row_gradients(model, tok, ro, temperature: float, chunk_tokens: int = 256, progress: bool = True):
    """(N, P) float32: the gradient of each row's response log-prob over the trainable parameters."""
    import torch
    from tqdm.auto import tqdm
    from agents.ppo import response_logprobs
    params = [p for p in model.parameters() if p.requires_grad]
    sizes = [p.numel() for p in params]
    out = np.zeros((len(ro.response_ids), sum(sizes)), dtype=np.float32)
    model.eval()          # no dropout: the gradient of the policy that acted
    for i in tqdm(range(len(ro.response_ids)), desc="row gradients", unit="row", disable=not progress):
        if len(ro.response_ids[i]) == 0:
            continue      # nothing was generated: no token to credit, a zero row
        model.zero_grad(set_to_none=True)
        lp, _, mask = response_logprobs(model, [ro.prompt_ids[i]], [ro.response_ids[i]], tok.pad_token_id,
                                        temperature, with_entropy=False, chunk_tokens=chunk_tokens)
        (lp * mask).sum().backward()
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in params])
        out[i] = flat.detach().cpu().numpy()
    bad = np.flatnonzero(~np.isfinite(out).all(axis=1))
    if len(bad):
        raise FloatingPointError(f"non-finite log-prob gradients on rows {bad[:5].tolist()}")
    return out


def row_gram(grads: np.ndarray, chunk: int = 1 << 17) -> np.ndarray:
    """G G^T in float64, a block of parameters at a time (the float64 copy of all of G would double it)."""
    gram = np.zeros((len(grads), len(grads)))
    for lo in range(0, grads.shape[1], chunk):
        part = grads[:, lo:lo + chunk].astype(np.float64)
        gram += part @ part.T
    return gram


def alignment_rows(grads: np.ndarray, adv: dict, truth: np.ndarray, goal: np.ndarray, halves=None,
                   baseline: str = BASELINE) -> list[dict]:
    """cos(A_est^T G, A^T G) per estimator with jackknife-t intervals over goals, and each one's paired
    difference against ``baseline``. With the truth's two independent halves (``halves``, 2 x N: each from
    half the continuations), also the cosine to the noise-free gradient: the halves' gradients share only
    the true one, so g_1 . g_2 estimates |g_true|^2, and g_est . g_MC / (|g_est| sqrt(g_1 . g_2)) corrects
    cos(g_est, g_MC) for the truth's noise (NaN where g_1 . g_2 <= 0)."""
    from benchmarks.credit.intervals import goal_members, jackknife_t
    for name, a in adv.items():
        bad = np.flatnonzero(~np.isfinite(a))
        if len(bad):
            raise FloatingPointError(f"estimator {name!r} gave non-finite advantages on rows "
                                     f"{bad[:5].tolist()}")
    names, k = list(adv), len(adv)
    extra = [] if halves is None else [np.asarray(halves[0]), np.asarray(halves[1])]
    weights = np.stack([adv[n] for n in names] + [truth] + extra).astype(np.float64)
    members = goal_members(goal)
    gram = row_gram(grads)       # every gradient below is a weighted row sum: its inner products are W K W^T

    def stat(idx):
        w = weights[:, idx]
        m = w @ gram[np.ix_(idx, idx)] @ w.T
        norm = np.sqrt(np.maximum(np.diag(m), 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            cos = np.where(norm[:k] * norm[k] > 0, m[:k, k] / (norm[:k] * norm[k]), 0.0)
            if not extra:
                return cos
            signal = m[k + 1, k + 2]
            return np.concatenate([cos, m[:k, k] / (norm[:k] * (np.sqrt(signal) if signal > 0 else np.nan))])

    # a cosine's interval stays in [-1, 1]; the noise-corrected one is an estimate that may pass 1
    bounds = (np.r_[np.full(k, -1.0), np.full(len(extra) and k, -np.inf)],
              np.r_[np.full(k, 1.0), np.full(len(extra) and k, np.inf)])
    point, lo, hi = jackknife_t(stat, members, bounds=bounds)
    rows = [{"estimator": n, "cos": point[j], "lo": lo[j], "hi": hi[j]} for j, n in enumerate(names)]
    if extra:
        for j, row in enumerate(rows):
            row.update({"cos_true": point[k + j], "cos_true_lo": lo[k + j], "cos_true_hi": hi[k + j]})
    if baseline in names:
        b = names.index(baseline)
        diff, d_lo, d_hi = jackknife_t(lambda idx: stat(idx)[:k] - stat(idx)[b], members)
        for j, row in enumerate(rows):
            row.update({f"minus_{baseline}": diff[j], f"minus_{baseline}_lo": d_lo[j],
                        f"minus_{baseline}_hi": d_hi[j]})
    return rows


def run_cell(name: str, folders: list[Path], out: Path, estimators=DEFAULT_ESTIMATORS, progress=True) -> list:
    from benchmarks.credit.aa_settings import cell_config
    from benchmarks.credit.hidden_report import write_csv
    from estimators import compute_advantages
    from benchmarks.credit.score_inputs import ScoreInputs
    policy, manifest = policy_of(folders)
    cfg = cell_config(manifest)
    model, tok = rl_adapter(policy, cfg)
    t0 = time.perf_counter()
    grads, adv, truth, goal, halves = [], {n: [] for n in estimators}, [], [], []
    for k, folder in enumerate(folders):
        ro = pickle.loads((Path(folder) / "batch.pkl").read_bytes())["ro"]
        inputs, _ = ScoreInputs.load(Path(folder) / "score_inputs.npz")
        if len(inputs.adv) != len(ro.batch):
            raise ValueError(f"{folder}: score_inputs.npz has {len(inputs.adv)} rows, batch.pkl "
                             f"{len(ro.batch)}")
        grads.append(row_gradients(model, tok, ro, cfg.temperature, cfg.logits_chunk_tokens, progress))
        for n in estimators:
            adv[n].append(compute_advantages(ro.batch, n, **cfg.estimator_kwargs()))
        truth.append(inputs.adv)
        halves.append(inputs.halves)
        goal.append(np.char.add(f"{k}:", inputs.goal.astype(str)))
    grad_s = time.perf_counter() - t0
    G = np.concatenate(grads)
    split = None if any(h is None for h in halves) else np.concatenate(halves, axis=1)
    rows = alignment_rows(G, {n: np.concatenate(v) for n, v in adv.items()}, np.concatenate(truth),
                          np.concatenate(goal), split)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / "alignment.csv", rows)
    (folder / "alignment.json").write_text(json.dumps({
        "folders": [str(f) for f in folders], "policy": policy, "rows": int(G.shape[0]),
        "parameters": int(G.shape[1]), "gradient_seconds": grad_s, "lora_seed": cfg.seed,
        "normalisation": "each estimator's own (the trainer's)"}, indent=1))
    return rows


def main(argv=None) -> int:
    from benchmarks.credit.hidden_sweep import parse_cell
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cell", action="append", type=parse_cell, required=True,
                   help="NAME=FOLDER[,FOLDER...]: batch folders of one model policy, pooled")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--estimators", nargs="+", default=list(DEFAULT_ESTIMATORS))
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    from estimators import available_estimators
    unknown = sorted(set(args.estimators) - set(available_estimators()))
    if unknown:
        p.error(f"unknown estimator(s) {unknown}; available: {available_estimators()}")
    for name, folders in args.cell:
        try:
            rows = run_cell(name, folders, args.out, tuple(args.estimators), not args.no_progress)
        except (PolicyMismatch, FileNotFoundError) as exc:
            p.error(f"cell {name}: {exc}")
        for r in rows:
            print(f"{name} {r['estimator']:>14}: cos {r['cos']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
