"""Estimator quality against the true advantage, on text MDPs where it is exactly computable.

    python -m benchmarks.credit.estimator_quality [--out runs/estimator_quality --batches 6 --tasks 8 \
        --group-size 8]

Every batch draws ``--tasks`` worlds of ``benchmarks/credit/text_mdp.py`` (rooms, a key, a locked chest; the
observation text aliases bisimilar states with per-visit paraphrases and history-dependent feedback),
rolls out ``--group-size`` episodes of each world's fixed stochastic policy, and hands every estimator the
same StepBatch (anchor = observation text, action key = the command, reward 10 on the win, gamma 0.95,
mode mean_norm so every term is in return units). Ground truth: A(s_t, a_t) = Q_t(s, a) - V_t(s) of the
latent state s by finite-horizon DP (returns are cut at the horizon, so values depend on t).

What is compared, per row:
- step term = A(step_weight=1) - A(step_weight=0): GiGPO/BiGPO's within-group R - mean, PACE's Q - V;
  for HGPO the whole advantage (it has no episode term); GRPO has none (n/a).
- total = the advantage the estimator returns (episode term + step term).
Metrics (mean +- std over batches): Pearson correlation with the true A; NMSE = sum (est - A)^2 / sum A^2
(step term only: 1.0 = no better than predicting 0, which is what a singleton gets); sign agreement over
rows with |A| > 1e-6, where a 0 estimate counts as wrong; singleton rate = share of rows whose step group
has one member; impure rate = share of rows whose step group mixes different latent states.
NMSE(step, exact returns) feeds the same partition the exact expected return-to-go Q_t(s, a) of each row
instead of its sampled return. The sampled-return step error is (R - Q) + (V - baseline): the first part
is Monte-Carlo noise that every grouped row pays alike (and a singleton's 0 avoids), so NMSE(step) favours
singletons whenever that noise exceeds |A|. The exact-return NMSE keeps only the second part, the error of
the grouping and baseline, which is what the estimators differ in.

BiGPO/BiPACE embeddings come from a fixed featurizer of the observation text (``--featurizer``):
- ``bow`` (default): hashed bag of content words, i.e. lower-cased alphabetic words minus a generic English
  stop-word list (not the renderer's templates), each word a signed feature-hash in 512 dims, binary
  counts, l2-normalised. Paraphrases share the room, item and door words, but their verbs differ.
- ``tiny``: the offline tiny policy's hidden state (agents.models, BiPACE's layer depth) at the last
  token of the chat-templated observation; untrained weights, so this is a random-feature encoder.
The ``[oracle]`` rows cluster on a one-hot of the latent state (eps 0): perfect state grouping (still
pooled over time steps, like every estimator here).
Every registered estimator gets a row. RLOO and REINFORCE++ have no step level (like GRPO: total only).
GAGPO's whole advantage is its step-level (GAE) term, like HGPO's; for GraphHCA and GACA the step term is
what they add to GRPO's episode term (total - A^E). GACA's per-row NLL is -log pi(a|s) of the world's
own policy (one "token" per action). HCAPO/RELACE get an oracle hindsight scorer: hind_logp_sum =
log pi(a|s) + log(Q_t(s, a) / V_t(s)), the Bayes hindsight ratio with the discounted win value as the
outcome (clipped below at 1e-3; failed trajectories are not scored). ECPO, ProGPO, Gated-BEPO, HCAPO and
RELACE: the step term is what they add to A^E (HCAPO has no step groups: total only). NMSE with exact
returns is n/a where the step term is not a normalisation of returns within the step groups.
Outputs in --out: quality.csv (one row per estimator and batch), summary.md, quality.png. The default
takes ~25 s, most of it in GiGPO's similarity mode (difflib); ``--sim-thresh`` with no
value skips those rows.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.credit.advantage_metrics import corr, impure_rate, nmse, sign_agreement
from benchmarks.credit.group_stats import group_stats, step_groups
from benchmarks.credit.text_mdp import make_world, rollout, solve
from estimators import (StepBatch, available_estimators, compute_advantages, resolve_options,
                        step_returns)
from estimators.registry import pace_step_term
from estimators.returns import group_normalize

STOP_WORDS = frozenset(
    "a an the and or but of in on at to into onto from by for with without about as is are was were be been "
    "being am do does did have has had i you your yours he she it its we they them their this that these "
    "those there here what which who whom where when why how all any some no not nothing only own so than "
    "too very can will just up down out over under again then once".split())
METRICS = ("singleton_rate", "clusters_per_group", "impure_rate", "corr_step", "nmse_step", "sign_step",
           "nmse_exact", "corr_total", "sign_total")


# ------------------------------------------------------------------------------------ featurizers
class BowFeaturizer:
    """Signed feature-hashing of the set of content words, l2-normalised (deterministic, no fitting)."""

    def __init__(self, dim: int = 512):
        self.dim, self.cache = dim, {}

    def _word(self, word: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
        return h % self.dim, 1.0 if (h >> 63) & 1 else -1.0

    def __call__(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            if text not in self.cache:
                v = np.zeros(self.dim, dtype=np.float32)
                for w in sorted(set(re.findall(r"[a-z]+", text.lower())) - STOP_WORDS):
                    j, sign = self._word(w)
                    v[j] += sign
                self.cache[text] = v / max(float(np.linalg.norm(v)), 1e-12)
            out[i] = self.cache[text]
        return out


class TinyModelFeaturizer:
    """Hidden state of the offline tiny policy at the last prompt token (BiPACE's recipe, §6.1)."""

    def __init__(self):
        import torch
        from agents.models import decoder_layers, default_hidden_layer, load_policy
        self.torch = torch
        self.model, self.tok = load_policy("tiny")
        self.model.eval()
        self.layer = default_hidden_layer(len(decoder_layers(self.model)))
        self.cache = {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        todo = sorted({t for t in texts if t not in self.cache})
        for start in range(0, len(todo), 64):
            chunk = todo[start:start + 64]
            prompts = [self.tok.apply_chat_template([{"role": "user", "content": t}], tokenize=False,
                                                    add_generation_prompt=True) for t in chunk]
            self.tok.padding_side = "left"
            enc = self.tok(prompts, return_tensors="pt", padding=True)
            with self.torch.no_grad():
                hs = self.model(**enc, output_hidden_states=True).hidden_states[self.layer][:, -1].float()
            hs = self.torch.nn.functional.normalize(hs, dim=-1).numpy()
            self.cache.update(zip(chunk, hs))
        return np.stack([self.cache[t] for t in texts])


FEATURIZERS = {"bow": BowFeaturizer, "tiny": TinyModelFeaturizer}


# ------------------------------------------------------------------------------------ variants
@dataclass
class Variant:
    label: str
    estimator: str
    options: dict = field(default_factory=dict)
    embedding: str = ""           # "", "features" or "oracle"


def variants(eps_list: list[float], sim_thresh: list[float]) -> list[Variant]:
    out = [Variant("grpo", "grpo"), Variant("gigpo", "gigpo")]
    out += [Variant(f"gigpo sim>={t:g}", "gigpo", {"enable_similarity": True, "similarity_thresh": t})
            for t in sim_thresh]
    out += [Variant("hgpo", "hgpo"), Variant("pace", "pace")]
    for name in ("bigpo", "bipace"):
        out += [Variant(f"{name} eps={e:g}", name, {"eps": e}, "features") for e in eps_list]
        out.append(Variant(f"{name} [oracle]", name, {"eps": 0.0}, "oracle"))
    listed = {v.estimator for v in out}
    out += [Variant(name, name) for name in available_estimators() if name not in listed]   # the rest
    return out


# ------------------------------------------------------------------------------------ one batch
def sample_batch(rng: np.random.Generator, args):
    """Rollouts of --tasks fresh worlds x --group-size; returns the batch, true A, latent ids, texts and
    the exact expected return-to-go Q_t(s, a) of every row."""
    cols = {k: [] for k in ("group", "traj", "step", "reward", "anchor", "key", "latent", "true", "q",
                            "logp", "hind")}
    for task in range(args.tasks):
        world = make_world(rng, n_rooms=args.rooms, stuck_prob=args.stuck_prob)
        V, Q = solve(world, args.horizon, args.gamma)
        for g in range(args.group_size):
            for st in rollout(world, args.horizon, rng, args.paraphrases):
                t, s = st["t"], st["state"]
                cols["group"].append(task), cols["traj"].append(g), cols["step"].append(t)
                cols["reward"].append(st["reward"]), cols["anchor"].append(st["obs"])
                cols["key"].append(st["action_text"]), cols["latent"].append(task * 1000 + s)
                cols["true"].append(Q[t, s, st["action"]] - V[t, s])
                cols["q"].append(Q[t, s, st["action"]])
                cols["logp"].append(float(np.log(world.policy(s)[st["action"]])))
                ratio = Q[t, s, st["action"]] / V[t, s] if V[t, s] > 0 else 1.0
                cols["hind"].append(cols["logp"][-1] + float(np.log(max(ratio, 1e-3))))
    n = len(cols["group"])
    batch = StepBatch(np.array(cols["group"]), np.array(cols["traj"]), np.array(cols["step"]),
                      np.array(cols["reward"]), np.ones(n, dtype=bool), anchor=cols["anchor"],
                      action_key=cols["key"], resp_len=np.ones(n, dtype=np.int64), old_logp_sum=cols["logp"],
                      hind_logp_sum=cols["hind"])
    return batch, np.array(cols["true"]), np.array(cols["latent"]), cols["anchor"], np.array(cols["q"])


def step_term(batch: StepBatch, estimator: str, codes: np.ndarray, returns: np.ndarray | None = None,
              **opts) -> np.ndarray:
    """The registry's step term on given step groups (so each partition is computed once; `score`
    checks the sum A^E + w * step against `compute_advantages` on the first batch). ``returns``
    replaces the sampled step returns (the exact-return diagnostic)."""
    o = resolve_options(estimator, **opts)
    returns = step_returns(batch, o) if returns is None else returns
    if estimator in ("pace", "bipace", "pace_goal"):
        return pace_step_term(returns, codes, batch.action_key, o)
    return group_normalize(returns, codes, mode=o.mode, epsilon=o.epsilon, ddof=1, equal_tol=o.equal_tol,
                           singleton="zero")


# estimators whose step term is `step_term` on their step groups, and those without an episode term
GROUPED = ("gigpo", "bigpo", "pace", "bipace", "gigpo_goal", "pace_goal")
ALL_STEP = ("hgpo", "gagpo")


def score(v: Variant, batch: StepBatch, true: np.ndarray, latent: np.ndarray, feats: np.ndarray,
          episode: np.ndarray, gamma: float, q: np.ndarray, check: bool = False) -> dict:
    """Metrics of one variant on one batch; `episode` is the shared episode term A^E (GRPO, mean_norm)."""
    opts = dict(gamma=gamma, mode="mean_norm", **v.options)
    if v.embedding:
        dense = np.unique(latent, return_inverse=True)[1].reshape(-1)
        emb = feats if v.embedding == "features" else np.eye(int(dense.max()) + 1, dtype=np.float32)[dense]
        batch = batch.with_fields(embedding=emb)
    codes = step_groups(batch, v.estimator, **opts)
    if codes is None or v.estimator not in GROUPED:
        # GRPO/RLOO/REINFORCE++: no step level; HGPO/GAGPO: no episode term, all step level; the others:
        # what they add to A^E. The exact-return variant needs a step term of returns within groups: n/a
        total = compute_advantages(batch, v.estimator, **opts)
        step = None if codes is None else total - (episode if v.estimator not in ALL_STEP else 0.0)
        exact = None
    else:
        step = step_term(batch, v.estimator, codes, **opts)
        exact = step_term(batch, v.estimator, codes, returns=q, **opts)
        total = episode + step                     # step_weight 1
        if check and not np.allclose(total, compute_advantages(batch, v.estimator, **opts), atol=1e-9):
            raise RuntimeError(f"{v.label}: A^E + step term differs from compute_advantages; "
                               "the estimator's formula changed, update step_term()")
    row = {"corr_total": corr(total, true), "sign_total": sign_agreement(total, true)}
    row.update(group_stats(batch, codes))
    row.pop("mean_group_size")
    if codes is None:
        nan = float("nan")
        row.update(impure_rate=nan, corr_step=nan, nmse_step=nan, sign_step=nan, nmse_exact=nan)
        return row
    row.update(impure_rate=impure_rate(codes, lambda rows: len(set(latent[rows])) > 1),
               corr_step=corr(step, true), nmse_step=nmse(step, true), sign_step=sign_agreement(step, true),
               nmse_exact=nmse(exact, true) if exact is not None else float("nan"))
    return row


# ------------------------------------------------------------------------------------ reporting
def summarise(rows: list[dict], labels: list[str]) -> dict[str, dict[str, tuple[float, float]]]:
    out = {}
    for label in labels:
        mine = [r for r in rows if r["estimator"] == label]
        out[label] = {m: (float(np.mean([r[m] for r in mine])), float(np.std([r[m] for r in mine])))
                      for m in METRICS}
    return out


def markdown(summary: dict, header: str) -> str:
    names = ["estimator", "singleton rate", "clusters/task", "impure rate", "corr(step, A)", "NMSE(step)",
             "sign(step)", "NMSE(step, exact returns)", "corr(total, A)", "sign(total)"]
    lines = [header, "", "| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for label, s in summary.items():
        cells = []
        for m in METRICS:
            mean, std = s[m]
            cells.append("n/a" if np.isnan(mean) else
                         f"{mean:.1f}" if m == "clusters_per_group" else f"{mean:.3f} ± {std:.3f}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


COLOURS = {"grpo": "tab:gray", "gigpo": "tab:blue", "hgpo": "tab:purple", "pace": "tab:orange",
           "bigpo": "tab:green", "bipace": "tab:red", "rloo": "silver", "reinforce_pp": "dimgray",
           "gagpo": "tab:cyan", "graphhca": "tab:brown", "gaca": "tab:olive", "ecpo": "navy",
           "progpo": "darkgoldenrod", "gated_bepo": "teal", "hcapo": "crimson", "relace": "orchid"}


def plot(summary: dict, estimators: dict[str, str], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [("singleton_rate", "singleton rate (share of rows)\nlower = more step signal", (0, 1)),
              ("corr_step", "corr(step term, true A)\nhigher is better", (-0.1, 1)),
              ("nmse_step", "NMSE(step term) = Σ(est−A)²/ΣA²\nlower is better (1 = predicting 0)", None),
              ("sign_step", "sign agreement of step term\n(0 estimate = wrong) higher is better", (0, 1)),
              ("nmse_exact",
               "NMSE(step term) with exact returns Q(s,a)\ngrouping error only; lower is better", None)]
    labels = list(summary)[::-1]
    y = np.arange(len(labels))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 0.38 * len(labels) + 1.8),
                             sharey=True)
    for ax, (metric, xlabel, lim) in zip(axes, panels):
        mean = np.array([summary[lab][metric][0] for lab in labels])
        std = np.array([summary[lab][metric][1] for lab in labels])
        colours = [COLOURS.get(estimators[lab], "k") for lab in labels]
        ok = ~np.isnan(mean)
        ax.barh(y[ok], mean[ok], xerr=std[ok], color=np.array(colours)[ok], alpha=0.85, capsize=2)
        for yi in y[~ok]:
            ax.text(0.02, yi, "n/a", va="center", transform=ax.get_yaxis_transform(), color="gray")
        ax.set_xlabel(xlabel, fontsize=9)
        if lim:
            ax.set_xlim(*lim)
        if metric in ("nmse_step", "nmse_exact"):
            ax.axvline(1.0, color="k", ls="--", lw=0.8)          # the all-zero estimate
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, labels)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------ main
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="runs/estimator_quality", help="output folder")
    p.add_argument("--batches", type=int, default=6, help="independent batches (spread = std over them)")
    p.add_argument("--tasks", type=int, default=8, help="worlds (rollout groups) per batch")
    p.add_argument("--group-size", type=int, default=8, help="G: rollouts per world")
    p.add_argument("--horizon", type=int, default=40,
                   help="max steps per episode (no bootstrap); long enough that most episodes end in a win, "
                        "since values that depend on the time left are something no estimator here models")
    p.add_argument("--rooms", type=int, default=5, help="rooms per world")
    p.add_argument("--stuck-prob", type=float, default=0.15, help="chance that a door sticks")
    p.add_argument("--paraphrases", type=int, default=4,
                   help="templates per sentence drawn per visit (1 = none)")
    p.add_argument("--gamma", type=float, default=0.95, help="discount (estimators and DP)")
    p.add_argument("--eps", type=float, nargs="+", default=[0.05, 0.1, 0.2, 0.3], help="BiGPO/BiPACE radii")
    p.add_argument("--sim-thresh", type=float, nargs="*", default=[0.95, 0.8],
                   help="GiGPO similarity-mode thresholds (difflib; none: --sim-thresh with no value)")
    p.add_argument("--featurizer", choices=sorted(FEATURIZERS), default="bow", help="BiGPO embedding source")
    p.add_argument("--seed", type=int, default=0)


def run(args) -> dict:
    for name in ("batches", "tasks", "group_size", "horizon", "paraphrases"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise ImportError("the quality plot needs matplotlib: pip install 'bipace[bench]'") from exc
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    featurize = FEATURIZERS[args.featurizer]()
    vs = variants(args.eps, args.sim_thresh)
    rows, t0, n_rows, true_abs, seconds = [], time.perf_counter(), 0, [], {}
    for b in range(args.batches):
        rng = np.random.default_rng([args.seed, b])
        batch, true, latent, texts, q = sample_batch(rng, args)
        feats = featurize(texts)
        n_rows += len(batch)
        true_abs.append(np.mean(np.abs(true)))
        episode = compute_advantages(batch, "grpo", gamma=args.gamma, mode="mean_norm")
        for v in vs:
            t1 = time.perf_counter()
            rows.append({"estimator": v.label, "batch": b,
                         **score(v, batch, true, latent, feats, episode, args.gamma, q, check=b == 0)})
            seconds[v.label] = seconds.get(v.label, 0.0) + time.perf_counter() - t1
    with open(out / "quality.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["estimator", "batch", *METRICS])
        w.writeheader()
        w.writerows(rows)
    summary = summarise(rows, [v.label for v in vs])
    setting = (f"{args.batches} batches x {args.tasks} worlds x G={args.group_size}, horizon {args.horizon}, "
               f"{args.paraphrases} paraphrases, featurizer {args.featurizer}, gamma {args.gamma}, mean_norm")
    header = (f"Estimator error vs the true advantage ({setting}; {n_rows} step rows, mean |A| = "
              f"{np.mean(true_abs):.3f}); mean ± std over batches.")
    table = markdown(summary, header)
    (out / "summary.md").write_text(table)
    plot(summary, {v.label: v.estimator for v in vs}, out / "quality.png",
         "Estimator vs true advantage A = Q(s,a) − V(s) on aliased text MDPs (bars: mean ± std over "
         "batches)\n" + setting)
    print(table)
    print("estimator seconds (all batches): " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()))
    print(f"wrote {out / 'quality.csv'}, {out / 'summary.md'}, {out / 'quality.png'} "
          f"in {time.perf_counter() - t0:.1f} s")
    return summary


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    main()
