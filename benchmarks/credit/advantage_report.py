"""Scores of every estimator against Monte-Carlo advantages on the same rows, with bootstrap intervals over
goals, paired differences, and the report (CSV, Markdown, figure) of
``benchmarks/credit/advantage_accuracy.py``.

    est = estimator_advantages(batch, options)                 # {name: Estimate}; n/a ones say why
    res = score_all(est, truth, groups, expert_adv, n_boot=2000)
    write_report(res, out, header)

Metrics per estimator (``benchmarks/credit/advantage_metrics.py``, shared with ``estimator_quality.py``), all
on the advantage the estimator returns (what the policy gradient uses):
- ``pearson`` / ``spearman``: correlation with the MC advantage A = Q - V over all rows;
- ``sign``: sign agreement over rows whose |A| exceeds twice its standard error (a 0 estimate is wrong);
- ``nmse_scaled``: error left after the least-squares rescaling of the estimate (1 = explains nothing);
- ``singleton``: share of rows alone in their step group (no step-level signal); ``impure``: share of rows
  whose step group holds two states whose MC values differ by more than twice their joint standard error;
- ``expert_spearman``: rank agreement with the expert's advantage Q^E(s, a) - V^E(s) (QVal's view).
Intervals: percentile bootstrap over goals (rollout groups: a goal's rows are correlated), the same
resamples for every estimator, so a paired difference's interval is that of the difference.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.credit.advantage_metrics import corr, impure_rows, nmse_scaled, sign_agreement, spearman

METRICS = ("pearson", "spearman", "sign", "nmse_scaled", "singleton", "impure", "expert_spearman")
HIGHER_BETTER = {"pearson": True, "spearman": True, "sign": True, "nmse_scaled": False, "singleton": False,
                 "impure": False, "expert_spearman": True}
LABELS = {"pearson": "Pearson r", "spearman": "Spearman ρ", "sign": "sign (|A|>2SE)",
          "nmse_scaled": "NMSE (scaled)", "singleton": "singleton rate", "impure": "impure rate",
          "expert_spearman": "ρ with expert A"}
# the differences the issue names first; every estimator against GRPO is added to them
KEY_PAIRS = (("bipace", "gigpo"), ("gigpo", "grpo"), ("bipace", "grpo"))


@dataclass
class Estimate:
    """One estimator's advantages on the batch and its step groups (None without a step level), or why it
    could not run (``reason``)."""
    adv: np.ndarray | None
    codes: np.ndarray | None = None
    reason: str = ""


def estimator_advantages(batch, options: dict, names=None) -> dict[str, Estimate]:
    """Every registered estimator (or ``names``) on ``batch`` with ``options`` (the trainer's: gamma, mode,
    eps, ...). One that needs a field the batch lacks is reported with the field and how to produce it."""
    from estimators import REGISTRY, available_estimators, compute_advantages, step_groups
    from estimators.batch import missing_field_error
    out = {}
    for name in names or available_estimators():
        missing = [f for f in REGISTRY[name].needs if getattr(batch, f) is None]
        if missing:
            out[name] = Estimate(None, reason=str(missing_field_error(name, missing[0])))
            continue
        adv = compute_advantages(batch, name, **options)
        out[name] = Estimate(np.asarray(adv, dtype=float), step_groups(batch, name, **options))
    return out


@dataclass
class RowFlags:
    """Per-row quantities the metrics read, fixed before resampling."""
    singleton: np.ndarray | None
    impure: np.ndarray | None


def row_flags(est: Estimate, v: np.ndarray, v_se: np.ndarray) -> RowFlags:
    if est.codes is None:
        return RowFlags(None, None)

    def distinct(rows):         # two states whose values differ beyond twice their joint standard error
        dv = np.abs(v[rows][:, None] - v[rows][None, :])
        tol = 2 * np.sqrt(v_se[rows][:, None] ** 2 + v_se[rows][None, :] ** 2)
        return bool(np.any(dv > np.maximum(tol, 1e-9)))

    return RowFlags(np.bincount(est.codes)[est.codes] == 1, impure_rows(est.codes, distinct))


def metrics_on(adv: np.ndarray, flags: RowFlags, truth_adv: np.ndarray, keep_sign: np.ndarray,
               expert_adv: np.ndarray | None, idx: np.ndarray) -> np.ndarray:
    """The METRICS of one estimator on rows ``idx`` (a resample may repeat rows)."""
    e, a = adv[idx], truth_adv[idx]
    nan = float("nan")
    return np.array([
        corr(e, a), spearman(e, a), sign_agreement(e, a, keep_sign[idx]), nmse_scaled(e, a),
        nan if flags.singleton is None else float(flags.singleton[idx].mean()),
        nan if flags.impure is None else float(flags.impure[idx].mean()),
        nan if expert_adv is None else spearman(e, expert_adv[idx])])


@dataclass
class Results:
    names: list                 # estimators scored
    na: dict                    # estimator -> reason it could not run
    point: dict                 # estimator -> (len(METRICS),) on all rows
    boot: dict                  # estimator -> (n_boot, len(METRICS))
    pairs: list                 # (a, b)
    n_rows: int
    n_goals: int


def goal_resamples(groups: np.ndarray, n_boot: int, seed: int = 0) -> list[np.ndarray]:
    """Row indices of ``n_boot`` resamples of the goals (rollout groups) with replacement."""
    ids, inverse = np.unique(groups, return_inverse=True)
    members = [np.flatnonzero(inverse == g) for g in range(len(ids))]
    rng = np.random.default_rng(seed)
    return [np.concatenate([members[g] for g in rng.integers(0, len(ids), len(ids))]) for _ in range(n_boot)]


def score_all(estimates: dict[str, Estimate], truth, groups: np.ndarray, expert_adv: np.ndarray | None,
              n_boot: int = 2000, seed: int = 0) -> Results:
    names = [n for n, e in estimates.items() if e.adv is not None]
    na = {n: e.reason for n, e in estimates.items() if e.adv is None}
    keep = np.abs(truth.adv) > 2 * truth.se
    flags = {n: row_flags(estimates[n], truth.v, truth.v_se) for n in names}
    every = np.arange(len(truth.adv))
    point = {n: metrics_on(estimates[n].adv, flags[n], truth.adv, keep, expert_adv, every) for n in names}
    samples = goal_resamples(groups, n_boot, seed)
    boot = {n: np.array([metrics_on(estimates[n].adv, flags[n], truth.adv, keep, expert_adv, idx)
                         for idx in samples]) for n in names}
    pairs = [p for p in KEY_PAIRS if p[0] in names and p[1] in names]
    pairs += [(n, "grpo") for n in names if n != "grpo" and "grpo" in names and (n, "grpo") not in pairs]
    return Results(names, na, point, boot, pairs, len(truth.adv), len(np.unique(groups)))


def interval(values: np.ndarray) -> tuple[float, float]:
    ok = values[~np.isnan(values)]
    return (float("nan"),) * 2 if not len(ok) else tuple(np.percentile(ok, [2.5, 97.5]).tolist())


def pair_rows(res: Results) -> list[dict]:
    """Paired differences a - b of every metric, with their bootstrap intervals and whether 0 is outside."""
    out = []
    for a, b in res.pairs:
        for m, metric in enumerate(METRICS):
            diff = res.point[a][m] - res.point[b][m]
            lo, hi = interval(res.boot[a][:, m] - res.boot[b][:, m])
            beyond = bool(lo > 0 or hi < 0) if not np.isnan(lo) else False
            better = "" if not beyond else a if (diff > 0) == HIGHER_BETTER[metric] else b
            out.append({"pair": f"{a} - {b}", "metric": metric, "diff": diff, "lo": lo, "hi": hi,
                        "beyond_interval": beyond, "better": better})
    return out


def _cell(value: float, lo: float, hi: float) -> str:
    return "n/a" if np.isnan(value) else f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def markdown(res: Results, header: str) -> str:
    lines = [header, "", "| estimator | " + " | ".join(LABELS[m] for m in METRICS) + " |",
             "|---" * (len(METRICS) + 1) + "|"]
    order = sorted(res.names, key=lambda n: -np.nan_to_num(res.point[n][0], nan=-9))
    for n in order:
        cells = [_cell(res.point[n][m], *interval(res.boot[n][:, m])) for m in range(len(METRICS))]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    for n, why in res.na.items():
        lines.append(f"| {n} | n/a: {why} |" + " |" * (len(METRICS) - 1))
    lines += ["", "Paired differences (a - b, same rows; 95% bootstrap interval over goals; **bold** = the "
              "interval excludes 0):", "", "| pair | " + " | ".join(LABELS[m] for m in METRICS) + " |",
              "|---" * (len(METRICS) + 1) + "|"]
    rows = pair_rows(res)
    for a, b in res.pairs:
        cells = []
        for r in (r for r in rows if r["pair"] == f"{a} - {b}"):
            text = "n/a" if np.isnan(r["diff"]) else f"{r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"
            cells.append(f"**{text}**" if r["beyond_interval"] else text)
        lines.append(f"| {a} - {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def verdict(res: Results, metric: str = "pearson") -> list[str]:
    """One sentence per key pair: which differences in ``metric`` are beyond their interval."""
    out = []
    for r in pair_rows(res):
        if r["metric"] != metric or r["pair"].split(" - ")[0] not in ("bipace", "gigpo"):
            continue
        if np.isnan(r["diff"]):
            continue
        what = (f"{r['better']} is better, beyond the interval" if r["beyond_interval"]
                else "within the interval: not separated")
        out.append(f"{r['pair']}: {LABELS[metric]} {r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}], {what}")
    return out


def write_csvs(res: Results, out: Path) -> None:
    with open(out / "scores.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["estimator", "metric", "value", "lo", "hi"])
        for n in res.names:
            for m, metric in enumerate(METRICS):
                w.writerow([n, metric, res.point[n][m], *interval(res.boot[n][:, m])])
        for n, why in res.na.items():
            w.writerow([n, "n/a", why, "", ""])
    with open(out / "pairs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["pair", "metric", "diff", "lo", "hi", "beyond_interval", "better"])
        w.writeheader()
        w.writerows(pair_rows(res))


def plot(res: Results, estimates: dict, truth_adv: np.ndarray, truth_se: np.ndarray, path: Path,
         title: str) -> None:
    """Per-estimator scatter of its advantage against the MC advantage, then the correlations with their
    intervals."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = sorted(res.names, key=lambda n: -np.nan_to_num(res.point[n][0], nan=-9))
    cols = 5
    n_panels = len(names) + 1
    rows = int(np.ceil(n_panels / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 3.0 * rows))
    axes = np.atleast_1d(axes).ravel()
    for ax, n in zip(axes, names):
        ax.errorbar(truth_adv, estimates[n].adv, xerr=truth_se, fmt="o", ms=2.5, alpha=0.45, lw=0.4)
        ax.axhline(0, color="k", lw=0.5)
        ax.axvline(0, color="k", lw=0.5)
        lo, hi = interval(res.boot[n][:, 0])
        ax.set_title(f"{n}: r = {res.point[n][0]:.2f} [{lo:.2f}, {hi:.2f}]", fontsize=8)
        ax.set_xlabel("MC advantage Q − V (± SE)", fontsize=7)
        ax.tick_params(labelsize=6)
    ax = axes[len(names)]
    y = np.arange(len(names))[::-1]
    for k, m in enumerate((0, 1)):
        vals = np.array([res.point[n][m] for n in names])
        ci = np.array([interval(res.boot[n][:, m]) for n in names])
        ax.errorbar(vals, y + (0.15 if k else -0.15), xerr=np.abs(ci.T - vals), fmt="os"[k], ms=3, capsize=2,
                    label=LABELS[METRICS[m]])
    ax.set_yticks(y, names, fontsize=6)
    ax.axvline(0, color="k", lw=0.5)
    ax.legend(fontsize=6)
    ax.set_title("correlation with MC A (95% CI over goals)", fontsize=8)
    for extra in axes[len(names) + 1:]:
        extra.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
