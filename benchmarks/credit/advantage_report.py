"""Scores of every estimator against Monte-Carlo advantages on the same rows, with intervals over goals,
paired differences, and the report (CSV, Markdown, figure) of ``benchmarks/credit/advantage_accuracy.py``.

    inputs = ScoreInputs.of(truth, groups, expert_adv, own, common)  # score_inputs.py: truth, estimates
    scored_own, scored = score(inputs, "own"), score(inputs, "common")  # common: pairs compare credit
    write_csvs([scored_own, scored], out); markdown(scored_own, scored, header); verdict(scored)
    plot(scored_own, inputs.estimates["own"], truth.adv, truth.se, out / "accuracy.png", title)

Metrics per estimator (``advantage_metrics.py``, shared with ``estimator_quality.py``), on the advantage
the estimator returns (what the policy gradient uses):
- ``pearson``: correlation with the MC advantage A = Q - V over all rows (pooled over goals);
  ``pearson_within``: the mean over goals of each goal's own correlation (goals where A is constant are
  left out), which a goal-level offset in the estimate cannot raise;
- ``spearman``; ``sign``: sign agreement over rows whose |A| exceeds twice its standard error (a 0 estimate
  is wrong); ``nmse_scaled``: error left after the least-squares rescaling (1 = explains nothing);
- ``singleton``: share of rows alone in their step group; ``impure``: share of rows whose step group fails a
  same-state test: the states in the group (each with its MC value and standard error) are tested for one
  common value, chi-square at 5%, so a group of states that share a value is flagged 5% of the time
  whatever its size (the old "any pair differs by 2 SE" rule flagged big groups more);
- ``expert_spearman``: rank agreement with the expert's advantage Q^E(s, a) - V^E(s) (QVal's view).
Normalisation: each estimator is scored at its own (what training uses: GRPO and HGPO divide by the
group's std, the step-group estimators only centre), and again with every estimator at ``COMMON_MODE``:
dividing by a goal's std reweights goals in a pooled correlation, so paired differences are taken there,
where they measure credit, not normalisation. Intervals: jackknife over goals with Student's t at n - 1
(``intervals.jackknife_t``; its coverage on text MDPs is in docs/advantage-accuracy.md), on the logit scale
of each metric's range (``RANGES``), so an interval never leaves it; a paired difference is the jackknife
of the difference on the same goals, on its own scale (its coverage is measured there), cut to twice the
range.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.credit import advantage_metrics
from benchmarks.credit.advantage_metrics import corr, nmse_scaled, sign_agreement, spearman
from benchmarks.credit.intervals import goal_members, jackknife_t
from benchmarks.credit.score_inputs import Estimate, ScoreInputs
from benchmarks.stats import chi2_95

METRICS = ("pearson", "pearson_within", "spearman", "sign", "nmse_scaled", "singleton", "impure",
           "expert_spearman")
HIGHER_BETTER = {"pearson": True, "pearson_within": True, "spearman": True, "sign": True,
                 "nmse_scaled": False, "singleton": False, "impure": False, "expert_spearman": True}
LABELS = {"pearson": "Pearson r", "pearson_within": "r within goals", "spearman": "Spearman ρ",
          "sign": "sign (|A|>2SE)", "nmse_scaled": "NMSE (scaled)", "singleton": "singleton rate",
          "impure": "impure rate", "expert_spearman": "ρ with expert A"}
# each metric's range: its intervals stay inside (intervals.jackknife_t's bounds), a difference's in twice it
RANGES = {"pearson": (-1, 1), "pearson_within": (-1, 1), "spearman": (-1, 1), "sign": (0, 1),
          "nmse_scaled": (0, 1), "singleton": (0, 1), "impure": (0, 1), "expert_spearman": (-1, 1)}
BOUNDS = tuple(np.array([RANGES[m][k] for m in METRICS], dtype=float) for k in (0, 1))
DIFF_BOUNDS = (BOUNDS[0] - BOUNDS[1], BOUNDS[1] - BOUNDS[0])
COMMON_MODE = "mean_norm"
LOW_RELIABILITY = 0.3     # below it the truth is mostly noise: a column says so and does not rank
# BiPACE's ingredients apart: action keys (pace - gigpo), hidden-state groups (bigpo - gigpo), hidden states
# on top of action keys (bipace - pace), and both (bipace - gigpo); every other estimator is then set
# against BASELINE
DECOMPOSITION = (("pace", "gigpo"), ("bigpo", "gigpo"), ("bipace", "pace"), ("bipace", "gigpo"),
                 ("pace_goal", "pace"))   # action keys over the whole goal against per-state: coarser groups
BASELINE = "gigpo"


def impure_rows(codes: np.ndarray, start: np.ndarray, start_v: np.ndarray,
                start_se: np.ndarray) -> np.ndarray:
    """Per row: does its step group fail the same-state test? The group's distinct states (their MC values
    v_i with standard errors s_i) give Q = sum (v_i - v_w)^2 / s_i^2 around the weighted mean v_w; under
    one common value Q is chi-square with k - 1 degrees of freedom, so the group is impure when Q exceeds
    its 95% quantile. The grouping is ``advantage_metrics.impure_rows``'s; this is its ``distinct`` test."""
    def differ(rows) -> bool:
        _, first = np.unique(start[rows], return_index=True)
        if len(first) < 2:
            return False
        v, w = start_v[rows[first]], 1.0 / np.maximum(start_se[rows[first]], 1e-9) ** 2
        return float(np.sum(w * (v - np.sum(w * v) / np.sum(w)) ** 2)) > chi2_95(len(first) - 1)

    return advantage_metrics.impure_rows(codes, differ)


def _goal_corr(est: np.ndarray, adv: np.ndarray, members: list[np.ndarray]) -> np.ndarray:
    """Each goal's own Pearson r (NaN where A is constant within the goal)."""
    return np.array([corr(est[m], adv[m]) if np.ptp(adv[m]) > 1e-9 else np.nan for m in members])


@dataclass
class RowTerms:
    """One estimator's per-row and per-goal quantities, fixed before any resampling."""
    adv: np.ndarray
    singleton: np.ndarray | None
    impure: np.ndarray | None
    goal_r: np.ndarray            # per goal (the order of goal_members)


def row_terms(est: Estimate, inputs: ScoreInputs, members: list[np.ndarray]) -> RowTerms:
    singleton = impure = None
    if est.codes is not None:
        codes = np.asarray(est.codes)
        singleton = np.bincount(codes)[codes] == 1
        impure = impure_rows(codes, inputs.start, inputs.start_v, inputs.start_se)
    return RowTerms(est.adv, singleton, impure, _goal_corr(est.adv, inputs.adv, members))


def metrics_on(t: RowTerms, inputs: ScoreInputs, keep_sign: np.ndarray, goal_index: np.ndarray,
               idx: np.ndarray) -> np.ndarray:
    """The METRICS of one estimator on rows ``idx`` (whole goals)."""
    e, a = t.adv[idx], inputs.adv[idx]
    nan = float("nan")
    within = t.goal_r[np.unique(goal_index[idx])]
    return np.array([
        corr(e, a), float(np.nanmean(within)) if np.isfinite(within).any() else nan, spearman(e, a),
        sign_agreement(e, a, keep_sign[idx]), nmse_scaled(e, a),
        nan if t.singleton is None else float(t.singleton[idx].mean()),
        nan if t.impure is None else float(t.impure[idx].mean()),
        nan if inputs.expert_adv is None else spearman(e, inputs.expert_adv[idx])])


@dataclass
class Scored:
    kind: str                   # "own" or "common" normalisation
    names: list                 # estimators scored
    na: dict                    # estimator -> reason it could not run
    point: dict                 # estimator -> (len(METRICS),) on all rows
    lo: dict
    hi: dict
    pairs: list                 # dicts: pair, metric, diff, lo, hi, beyond_interval, better
    n_rows: int
    n_goals: int
    reliability: tuple = (float("nan"), float("nan"))   # ScoreInputs.reliability(): unbiased, split-half


def default_pairs(names) -> list[tuple[str, str]]:
    pairs = [p for p in DECOMPOSITION if p[0] in names and p[1] in names]
    if BASELINE in names:
        pairs += [(n, BASELINE) for n in names if n != BASELINE and (n, BASELINE) not in pairs]
    return pairs


def score(inputs: ScoreInputs, kind: str = "common", pairs=None) -> Scored:
    """Every estimator of ``inputs.estimates[kind]``, with jackknife-t intervals over goals; paired
    differences (``pairs``, default ``default_pairs``) the same way."""
    estimates = inputs.estimates[kind]
    names = [n for n, e in estimates.items() if e.adv is not None]
    na = {n: e.reason for n, e in estimates.items() if e.adv is None}
    members = goal_members(inputs.goal)
    goal_index = np.empty(len(inputs.goal), dtype=int)
    for g, m in enumerate(members):
        goal_index[m] = g
    keep = np.abs(inputs.adv) > 2 * inputs.se
    terms = {n: row_terms(estimates[n], inputs, members) for n in names}

    def stat_of(*which):
        if len(which) == 1:
            return lambda idx: metrics_on(terms[which[0]], inputs, keep, goal_index, idx)
        return lambda idx: (metrics_on(terms[which[0]], inputs, keep, goal_index, idx)
                            - metrics_on(terms[which[1]], inputs, keep, goal_index, idx))

    point, lo, hi = {}, {}, {}
    for n in names:
        point[n], lo[n], hi[n] = jackknife_t(stat_of(n), members, bounds=BOUNDS)
    rows = []
    for a, b in (default_pairs(names) if pairs is None else pairs):
        # the plain jackknife-t, whose coverage interval_coverage measured for differences; cut to the range
        diff, d_lo, d_hi = jackknife_t(stat_of(a, b), members)
        d_lo, d_hi = np.maximum(d_lo, DIFF_BOUNDS[0]), np.minimum(d_hi, DIFF_BOUNDS[1])
        for m, metric in enumerate(METRICS):
            beyond = bool(d_lo[m] > 0 or d_hi[m] < 0) if np.isfinite(d_lo[m]) else False
            better = "" if not beyond else a if (diff[m] > 0) == HIGHER_BETTER[metric] else b
            rows.append({"pair": f"{a} - {b}", "metric": metric, "diff": float(diff[m]), "lo": float(d_lo[m]),
                         "hi": float(d_hi[m]), "beyond_interval": beyond, "better": better})
    return Scored(kind, names, na, point, lo, hi, rows, len(inputs.adv), len(members), inputs.reliability())


def _cell(value: float, lo: float, hi: float) -> str:
    return "n/a" if np.isnan(value) else f"{value:.3f} [{lo:.3f}, {hi:.3f}]"


def table(s: Scored) -> list[str]:
    lines = ["| estimator | " + " | ".join(LABELS[m] for m in METRICS) + " |",
             "|---" * (len(METRICS) + 1) + "|"]
    for n in sorted(s.names, key=lambda n: -np.nan_to_num(s.point[n][0], nan=-9)):
        lines.append(f"| {n} | " + " | ".join(_cell(s.point[n][m], s.lo[n][m], s.hi[n][m])
                                              for m in range(len(METRICS))) + " |")
    for n, why in s.na.items():
        lines.append(f"| {n} | n/a: {why} |" + " |" * (len(METRICS) - 1))
    return lines


def pair_table(s: Scored) -> list[str]:
    lines = ["| pair | " + " | ".join(LABELS[m] for m in METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
    for pair in dict.fromkeys(r["pair"] for r in s.pairs):
        cells = []
        for r in (r for r in s.pairs if r["pair"] == pair):
            text = "n/a" if np.isnan(r["diff"]) else f"{r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"
            cells.append(f"**{text}**" if r["beyond_interval"] else text)
        lines.append(f"| {pair} | " + " | ".join(cells) + " |")
    return lines


def reliability_lines(s: Scored) -> list[str]:
    """The truth's reliability, a warning below ``LOW_RELIABILITY``, and each estimator's Pearson r beside
    the same r disattenuated by it (r / sqrt(reliability): its correlation with the noise-free A, since the
    estimators' advantages carry none of the truth's sampling noise)."""
    rel, split = s.reliability
    if not np.isfinite(rel):
        return ["Reliability of the MC A: not recorded (a run before the unfloored noise was kept)."]
    lines = [f"Reliability of the MC A (share of its spread across rows that is not sampling noise): "
             f"{rel:.3f} from the per-state sample variances, {split:.3f} split-half (Spearman-Brown)."]
    if rel < LOW_RELIABILITY:
        lines += ["", f"**Low reliability ({rel:.2f} < {LOW_RELIABILITY}): the truth is mostly noise here; "
                      "these figures do not rank the estimators.**"]
    i = METRICS.index("pearson")
    lines += ["", f"Pearson r at {COMMON_MODE}, raw and disattenuated (r / sqrt({rel:.3f})):", "",
              "| estimator | Pearson r | disattenuated |", "|---|---|---|"]
    for n in sorted(s.names, key=lambda n: -s.point[n][i]):
        lines.append(f"| {n} | {s.point[n][i]:.3f} | {disattenuated(s.point[n][i], rel):.3f} |")
    return lines


def disattenuated(r: float, reliability: float) -> float:
    from benchmarks.credit.mc_noise import disattenuate
    return disattenuate(r, reliability)


def markdown(own: Scored, common: Scored, header: str) -> str:
    interval = f"95% jackknife-t interval over {common.n_goals} goals"
    lines = [header, "", *reliability_lines(common), "",
             f"Each estimator at its own normalisation (what training uses); [{interval}]:", "",
             *table(own), "", f"Every estimator at one normalisation ({COMMON_MODE}), so that differences "
             "measure credit, not normalisation:", "", *table(common), "",
             f"Paired differences at {COMMON_MODE} (a - b, same goals; {interval}; **bold** = the interval "
             "excludes 0). First BiPACE's ingredients apart, then every estimator against "
             f"{BASELINE}:", "", *pair_table(common)]
    return "\n".join(lines) + "\n"


def verdict(s: Scored, metric: str = "pearson") -> list[str]:
    """One sentence per decomposition pair in ``metric``: separated (and which is closer to A) or not."""
    out = []
    names = {f"{a} - {b}" for a, b in DECOMPOSITION}
    for r in s.pairs:
        if r["metric"] != metric or r["pair"] not in names or np.isnan(r["diff"]):
            continue
        what = (f"{r['better']} is closer to A, beyond the interval" if r["beyond_interval"]
                else "not separated at this size")
        out.append(f"{r['pair']}: {LABELS[metric]} {r['diff']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}], {what}")
    return out


def write_csvs(scored: list[Scored], out: Path) -> None:
    """scores.csv, pairs.csv and reliability.json (what the leaderboard reads) in ``out``."""
    rel, split = scored[0].reliability
    (out / "reliability.json").write_text(json.dumps({"unbiased": rel if np.isfinite(rel) else None,
                                                      "split_half": split if np.isfinite(split) else None}))
    with open(out / "scores.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["normalisation", "estimator", "metric", "value", "lo", "hi"])
        for s in scored:
            for n in s.names:
                for m, metric in enumerate(METRICS):
                    w.writerow([s.kind, n, metric, s.point[n][m], s.lo[n][m], s.hi[n][m]])
            for n, why in s.na.items():
                w.writerow([s.kind, n, "n/a", why, "", ""])
    with open(out / "pairs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["normalisation", "pair", "metric", "diff", "lo", "hi", "beyond_interval",
                               "better"])
        w.writeheader()
        for s in scored:
            w.writerows({"normalisation": s.kind, **r} for r in s.pairs)


def plot(s: Scored, estimates: dict, truth_adv: np.ndarray, truth_se: np.ndarray, path: Path,
         title: str) -> None:
    """Per-estimator scatter of its advantage against the MC advantage, then the correlations with their
    intervals."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = sorted(s.names, key=lambda n: -np.nan_to_num(s.point[n][0], nan=-9))
    cols = 5
    rows = int(np.ceil((len(names) + 1) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols, 3.0 * rows))
    axes = np.atleast_1d(axes).ravel()
    for ax, n in zip(axes, names):
        ax.errorbar(truth_adv, estimates[n].adv, xerr=truth_se, fmt="o", ms=2.5, alpha=0.45, lw=0.4)
        ax.axhline(0, color="k", lw=0.5)
        ax.axvline(0, color="k", lw=0.5)
        ax.set_title(f"{n}: r = {s.point[n][0]:.2f} [{s.lo[n][0]:.2f}, {s.hi[n][0]:.2f}]", fontsize=8)
        ax.set_xlabel("MC advantage Q − V (± SE)", fontsize=7)
        ax.tick_params(labelsize=6)
    ax = axes[len(names)]
    y = np.arange(len(names))[::-1]
    for k, m in enumerate((0, 1)):
        vals = np.array([s.point[n][m] for n in names])
        ci = np.array([[s.lo[n][m], s.hi[n][m]] for n in names])
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
