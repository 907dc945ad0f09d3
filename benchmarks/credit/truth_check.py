"""Does the Monte-Carlo truth measure its own noise right, and does its standard error keep its promises?
Checked on text MDPs, where dynamic programming gives the exact truth.

    python -m benchmarks.credit.truth_check [--out runs/truth_check --batches 40 --goals 12 \
        --group-size 6 --k 8 32 --truths plain strata --rules floor pooled sample --horizon 40]

``advantage_accuracy.py`` scores estimators against the MC advantage A_hat = Q_hat - V_hat of
``mc_truth.py`` and reads three things off its noise: the reliability var(A) / var(A_hat) (how much a
correlation with A_hat is attenuated), the rows with |A_hat| > 2 SE (the sign column), and the same-state
test of ``advantage_report.impure_rows`` (a step group's distinct states, each value with its SE, tested
for one common value at 5%). This harness plays the same pipeline on ``text_mdp`` worlds and compares with
the exact values (the batches, their exact values and the continuations, with ``play``, ``first_action``
and ``conditioned_values`` named below, are simulated in ``truth_check_play.py``; the checks are here):

- a batch (one ``advantage_accuracy`` cell) is ``--goals`` worlds x ``--group-size`` G episodes of each
  world's own stochastic policy (``text_mdp.rollout``); ``mc_truth.plan_starts`` finds the distinct states
  (an action prefix; a door's outcome is recorded with its action, so one key is one latent state);
- from each, K continuations (``--k``) play the same policy from the latent state and time (the MDP is
  Markov in them; ``play`` runs them all at once), and ``mc_truth.truth_of`` turns them into Q, V, A and
  SEs, once per SE rule (``mc_noise.start_se``): ``floor`` is the old one, the SE of a Beta(1, 1) win rate
  times the batch's largest return as a minimum; ``pooled`` the new default; ``sample`` no floor at all;
- the exact truth of a row is A = r_t + gamma V(t+1, s_{t+1}) - V(t, s_t) by DP (``text_mdp.solve``; the
  recorded s_{t+1}, as MC's Q uses it: Q(t, s, a) - V(t, s) when doors never stick), and the exact
  variance of a return from (t, s) (its second moment by the same recursion) says which rows carry noise;
- beside it (``--truths``, both by default), on the same batches and K, the scripted-policy truth of
  ``strata.py``: the world's policy is a softmax over known preferences, so pi(a_t | s_t) of every row is
  exact; ``strata.plan_strata`` on the same episodes finds the strata (distinct state and recorded action,
  pi < 1), and K continuations per stratum start with the policy's action drawn given that it is not the
  recorded one (``first_action``: the action's index is excluded, not its outcome; strata whose keys differ
  only in that door's outcome share their continuations, as one stratum would in a deterministic env), then
  play the policy. Their returns go to ``strata.strata_truth`` and ``strata.strata_reliability`` as
  ``ContinuationStore`` records; its SE is ``pooled``'s. Its rows are scored against the same exact A, and
  against its own exact expectation (``chain`` of the exact mean of each stratum's conditioned return,
  ``conditioned_values``): the two agree when doors never stick, but strata.py assumes the recorded action
  always leads to the recorded s_{t+1}, so where a door may stick its A is (1 - pi)(Q_recorded - Qbar),
  off A = Q_recorded - V by pi (Q_recorded - Q(s, a)), and each state's W by the same terms down the
  episode (which also moves the impurity test's equal-value groups apart).

Reported per K, truth and SE rule (rates pooled over batches; their SEs from the spread over batches):
- continuations played per batch: K per distinct state (plain), K per group of strata (strata);
- reliability per batch: the true var(A) / var(A_hat) against the unbiased estimate, the split-half
  (Spearman-Brown) estimate and 1 - mean(SE^2) / var(A_hat) (what the report printed, floors included);
  mean over batches and root-mean-square error against the true one; ``own`` var(E A_hat) / var(A_hat),
  the same but for the strata where doors stick;
- ``null pass``: rows whose true A is exactly 0 that pass |A_hat| > 2 SE (nominal 4.55%). In these MDPs
  such rows are hopeless states (no win within the horizon: every continuation loses, A_hat = 0), so no
  rule can fail there; hence ``miss 2SE``: rows whose A_hat carries noise with |A_hat - A| > 2 SE, the rate
  at which a 0 advantage with that row's noise would pass (nominal 4.55%), and the same among the rows
  whose K samples all agreed (the case a floor is for); ``miss 2SE, own`` against the truth's own exact
  expectation (the strata's differs where doors stick);
- ``wrong sign``: passing rows whose A_hat has the wrong sign (a false-discovery share, not an error rate:
  it grows as fewer true advantages are large enough to pass);
- ``impure null``: groups of distinct starts at one latent state and time (equal values by construction)
  that carry noise, flagged by ``advantage_report.impure_rows`` (nominal 5%).
Outputs in ``--out``: truth_check.json (setting, per-batch and pooled records) and truth_check.csv (the
pooled table). The default takes about 25 s on one core (about 15 s with --truths plain).

Measured with the defaults (40 batches x 12 worlds x G = 6, 56,251 rows; horizon 40, 5 rooms), each rate
+- 0.1-0.2 points: the unbiased reliability is 0.351 against a true 0.358 at K = 8 (0.687 against 0.688 at
K = 32), split-half 0.353 (0.681); the old floor's 1 - mean(SE^2) / var is -0.69 (0.36). 2-SE miss and
impurity null rates: old floor 0.4% and 0.4% at K = 8, 1.2% and 1.3% at K = 32; ``pooled`` 4.5% and 4.5%,
4.4% and 4.8%; no floor 8.4% and 6.9%, 5.6% and 5.5%. ``pooled`` stays at 4.3-5.7% with --horizon 15
and with --rooms 8 --horizon 25; with --horizon 20 --route-bonus 0.5 (few wins: 40% of the noisy rows'
K = 8 samples all agree) it is 3.0-3.5%, below nominal because groups whose continuations all lost cannot
be flagged by any SE (no floor: 2.7%).

The strata truth, same defaults and batches: for 1.04x the plain truth's continuations (10,687 against
10,278 per batch at K = 8) its true reliability is 0.631 at K = 8 (plain 0.358) and 0.902 at K = 32
(plain 0.688); the unbiased estimate says 0.601 (RMSE 0.046) and 0.857 (0.052), split-half 0.597 (0.051)
and 0.857 (0.053), against the 0.603 and 0.862 of its own expectation (sticking doors: see above). Its
2-SE miss rate against its own expectation is 4.8% at K = 8 and 4.6% at K = 32, against the DP A 6.0% and
8.5%, and the impurity null 5.8% and 7.0%: the doors' term, as K shrinks the noise. It passes twice the
rows |A_hat| > 2 SE that plain ``pooled`` passes at K = 8 (10,823 against 5,301), 3.9% of them with the
wrong sign (plain 10.3%). With --stuck-prob 0 (deterministic, as strata.py assumes; 53,377 rows) its
expectation is A on every row: reliability 0.621 true, 0.618 unbiased, 0.612 split-half at K = 8 (plain
0.365), 0.869, 0.866 and 0.866 at K = 32 (plain 0.692); 2-SE miss 4.6% and 4.5%, impurity null 5.4% and
5.0% (plain pooled 4.3% and 5.1%, 4.5% and 4.9%). With --horizon 20 --route-bonus 0.5 (few wins) it
keeps 0.617 against 0.371 at K = 8, and its rates sit at 3.6-4.7% (plain 3.0-3.5%).
"""
from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.credit import mc_noise
from benchmarks.credit.mc_truth import truth_of
from benchmarks.credit.truth_check_play import (Batch, MemoryStore, StrataSetup, continuations, sample_batch,
                                                strata_continuations, strata_of)

Z_NOMINAL = 0.0455          # P(|N(0, 1)| > 2)
CHI2_NOMINAL = 0.05
TRUTHS = ("plain", "strata")
STRATA_RULE = "pooled"      # strata_truth's SE: mc_noise.pooled_se with NU0


# ------------------------------------------------------------------------------------ checks
def null_groups(b: Batch, var: np.ndarray | None = None) -> np.ndarray:
    """Per start, a group id shared by the distinct starts at one (world, time, latent state) whose return
    carries noise (equal true values by construction); -1 for the rest (a start alone, or a hopeless one:
    every continuation loses, the test cannot flag it whatever the SE)."""
    key = (b.start_world * (b.start_t.max() + 1) + b.start_t) * (b.start_state.max() + 1) + b.start_state
    _, code, size = np.unique(key, return_inverse=True, return_counts=True)
    code = code.reshape(-1)
    var = b.var_v if var is None else var
    return np.where((size[code] > 1) & (var > 1e-12), code, -1)


def sign_counts(b: Batch, truth, target: np.ndarray, noisy: np.ndarray, agree: np.ndarray,
                group: np.ndarray) -> dict:
    """The counts of one truth's checks: rows whose true A is 0 that pass |A_hat| > 2 SE; noisy rows with
    |A_hat - A| > 2 SE (``miss``; ``miss_own`` against ``target``, the truth's own exact expectation, which
    is A but for the strata in a world whose doors stick), also among the rows whose samples all agreed;
    wrong signs among passing rows; equal-value groups (``group``, per start) the impurity test flags."""
    from benchmarks.credit.advantage_report import impure_rows
    member = np.flatnonzero(group >= 0)
    zero = np.abs(b.a_true) < 1e-12
    passing = np.abs(truth.adv) > 2 * truth.se
    missed = np.abs(truth.adv - b.a_true) > 2 * truth.se
    flagged = impure_rows(group[member], member, truth.v_start[member], truth.se_start[member])
    return {"se_reliability": mc_noise.reliability_of(truth.adv, float(np.mean(truth.se ** 2))),
            "zero": int(zero.sum()), "zero_pass": int((zero & passing).sum()),
            "noisy": int(noisy.sum()), "miss": int((noisy & missed).sum()),
            "miss_own": int((noisy & (np.abs(truth.adv - target) > 2 * truth.se)).sum()),
            "agree": int(agree.sum()), "agree_miss": int((agree & missed).sum()),
            "pass": int(passing.sum()),
            "wrong": int((passing & (np.sign(truth.adv) != np.sign(b.a_true))).sum()),
            "groups": len(np.unique(group[member])), "flagged": len(np.unique(group[member][flagged]))}


def _true_reliability(target: np.ndarray, adv: np.ndarray) -> float:
    """var(target) / var(A_hat) (ddof 1): the true reliability when ``target`` is A_hat's expectation."""
    spread = float(np.var(adv, ddof=1))
    return float(np.var(target, ddof=1)) / spread if spread > 0 else float("nan")


def check_batch(b: Batch, samples: mc_noise.Samples, rules: list[str], gamma: float) -> dict:
    """One batch at one K, the plain truth: the true and estimated reliabilities, and per SE rule the counts
    of the sign and impurity checks and the reliability its SEs imply."""
    valid = np.ones(len(b.reward), dtype=bool)
    stats = mc_noise.start_stats(samples)
    adv = mc_noise.row_advantage(b.plan, stats, b.reward, valid, gamma, 0.0)[2]
    true = _true_reliability(b.a_true, adv)
    out = {"rows": len(adv), "continuations": len(samples.start), "true": true, "true_own": true,
           "unbiased": mc_noise.unbiased_reliability(b.plan, samples, b.reward, valid, gamma, 0.0),
           "split_half": mc_noise.split_half_reliability(b.plan, samples, b.reward, valid, gamma, 0.0)[1]}
    group = null_groups(b)
    noisy = b.noise_true > 1e-12
    agree = noisy & (mc_noise.row_noise(b.plan, stats, gamma) == 0)      # noise the K samples did not show
    for rule in rules:
        truth = truth_of(b.plan, samples, b.reward, valid, gamma, 0.0, se=rule)
        out[rule] = sign_counts(b, truth, b.a_true, noisy, agree, group)
    return out


def check_strata(b: Batch, st: StrataSetup, store: MemoryStore, played: int, gamma: float) -> dict:
    """One batch at one K, the strata truth (``strata.strata_truth``: its SE is the pooled rule's, and
    ``strata.strata_reliability`` its two reliability estimates), in ``check_batch``'s shape."""
    from benchmarks.credit.strata import strata_reliability, strata_truth
    truth = strata_truth(st.plan, store, b.reward, gamma)
    unbiased, half = strata_reliability(st.plan, store, b.reward, gamma)
    noisy = st.noise1 > 1e-12
    agree = noisy & (truth.noise_var == 0)
    return {"rows": len(truth.adv), "continuations": played, "true": _true_reliability(b.a_true, truth.adv),
            "true_own": _true_reliability(st.target, truth.adv), "unbiased": unbiased, "split_half": half,
            STRATA_RULE: sign_counts(b, truth, st.target, noisy, agree, null_groups(b, st.w_noise1))}


def pooled_rate(per_batch: list[dict], num: str, den: str) -> tuple[float, float]:
    """sum num / sum den over batches, and its SE from the spread over batches (a ratio estimator's
    linearisation: rows of one batch share states, so they are not independent draws)."""
    x = np.array([b[num] for b in per_batch], dtype=float)
    n = np.array([b[den] for b in per_batch], dtype=float)
    if n.sum() == 0:
        return float("nan"), float("nan")
    rate, k = x.sum() / n.sum(), len(x)
    return float(rate), float(np.sqrt(k / max(k - 1, 1) * np.sum((x - rate * n) ** 2)) / n.sum())


def _mean_rmse(est: np.ndarray, true: np.ndarray) -> tuple[float, float]:
    ok = np.isfinite(est) & np.isfinite(true)
    if not ok.any():
        return float("nan"), float("nan")
    return float(np.mean(est[ok])), float(np.sqrt(np.mean((est[ok] - true[ok]) ** 2)))


def summarise(per_batch: list[dict], k: int, rules: list[str], truth: str = "plain") -> list[dict]:
    """One record per SE rule of one truth at one K: reliabilities (mean over batches, RMSE against the true
    one), continuations played and the pooled rates with their SEs."""
    true = np.array([b["true"] for b in per_batch])
    unbiased = _mean_rmse(np.array([b["unbiased"] for b in per_batch]), true)
    half = _mean_rmse(np.array([b["split_half"] for b in per_batch]), true)
    records = []
    for rule in rules:
        counts = [b[rule] for b in per_batch]
        se_rel = _mean_rmse(np.array([c["se_reliability"] for c in counts]), true)
        rec = {"k": k, "truth": truth, "rule": rule, "batches": len(per_batch),
               "rows": sum(b["rows"] for b in per_batch),
               "continuations": sum(b["continuations"] for b in per_batch),
               "rel_true": float(np.nanmean(true)),
               "rel_true_own": float(np.nanmean([b["true_own"] for b in per_batch])),
               "rel_unbiased": unbiased[0],
               "rel_unbiased_rmse": unbiased[1], "rel_split_half": half[0], "rel_split_half_rmse": half[1],
               "rel_se": se_rel[0], "rel_se_rmse": se_rel[1]}
        for name, num, den in (("null_pass", "zero_pass", "zero"), ("miss", "miss", "noisy"),
                               ("miss_own", "miss_own", "noisy"), ("miss_agree", "agree_miss", "agree"),
                               ("wrong_sign", "wrong", "pass"), ("impure_null", "flagged", "groups")):
            rec[name], rec[name + "_se"] = pooled_rate(counts, num, den)
            rec[name + "_n"] = sum(c[den] for c in counts)
        records.append(rec)
    return records


def _pct(rate: float, se: float | None = None) -> str:
    if not np.isfinite(rate):
        return "n/a"
    return f"{100 * rate:.1f}%" + (f" ± {100 * se:.2f}" if se is not None else "")


def _cell(r: dict, name: str, se: bool = True) -> str:
    return f"{_pct(r[name], r[name + '_se'] if se else None)} ({r[name + '_n']})"


RATES_NOTE = (f"null pass: rows whose true A is 0 passing |A_hat| > 2 SE (nominal {100 * Z_NOMINAL:.2f}%); "
              "miss 2SE: rows with noise where |A_hat - A| > 2 SE (nominal the same); 'own' the same against "
              "the truth's own exact expectation (the strata's differs from A where doors stick); "
              "'samples agree' among the rows whose K samples all agreed; wrong sign: passing rows with the "
              f"wrong sign; impure null: equal-value groups flagged (nominal {100 * CHI2_NOMINAL:.0f}%). "
              "± one SE over batches, (n) rows or groups")


def tables(records: list[dict]) -> str:
    """The reliability table (one row per K and truth) and the error-rate table (one row per K, truth and
    SE rule)."""
    keys = list(dict.fromkeys((r["k"], r["truth"]) for r in records))
    rules = list(dict.fromkeys(r["rule"] for r in records))
    plain = {r["k"]: r["continuations"] for r in records if r["truth"] == "plain"}
    lines = ["Reliability var(A) / var(A_hat) per batch: mean over batches (RMSE against the true one); "
             "'own' is var(E A_hat) / var(A_hat), which the estimates estimate (E A_hat is A but for the "
             "strata where doors stick); '1 - SE^2, rule' is 1 - mean(SE^2) / var(A_hat), what the report "
             "printed; continuations played per batch (and against the plain truth's)", "",
             "| K | truth | continuations | true | own | unbiased | split-half | "
             + " | ".join(f"1 - SE^2, {r}" for r in rules) + " |", "|---" * (7 + len(rules)) + "|"]
    for k, truth in keys:
        mine = {r["rule"]: r for r in records if (r["k"], r["truth"]) == (k, truth)}
        r0 = next(iter(mine.values()))
        played = f"{r0['continuations'] / r0['batches']:.0f}"
        if truth != "plain" and plain.get(k):
            played += f" ({r0['continuations'] / plain[k]:.2f}x)"
        cells = [played, f"{r0['rel_true']:.3f}", f"{r0['rel_true_own']:.3f}",
                 f"{r0['rel_unbiased']:.3f} ({r0['rel_unbiased_rmse']:.3f})",
                 f"{r0['rel_split_half']:.3f} ({r0['rel_split_half_rmse']:.3f})"]
        cells += [f"{mine[r]['rel_se']:.3f} ({mine[r]['rel_se_rmse']:.3f})" if r in mine else "-"
                  for r in rules]
        lines.append(f"| {k} | {truth} | " + " | ".join(cells) + " |")
    lines += ["", RATES_NOTE, "", "| K | truth | SE rule | null pass | miss 2SE | miss 2SE, own | miss where "
              "samples agree | wrong sign (passing rows) | impure null |", "|---" * 9 + "|"]
    for r in records:
        cells = [_cell(r, "null_pass", se=False), _cell(r, "miss"), _cell(r, "miss_own"),
                 _cell(r, "miss_agree", se=False), _cell(r, "wrong_sign"), _cell(r, "impure_null")]
        lines.append(f"| {r['k']} | {r['truth']} | {r['rule']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def nominal_verdict(records: list[dict], tolerance: float = 0.015) -> list[str]:
    """Per K, truth and rule: are the 2-SE miss rate and the impurity null rate within ``tolerance`` of
    nominal?"""
    out = []
    for r in records:
        ok = [abs(r["miss"] - Z_NOMINAL) <= tolerance, abs(r["impure_null"] - CHI2_NOMINAL) <= tolerance]
        out.append(f"K={r['k']} {r['truth']} {r['rule']}: miss 2SE {_pct(r['miss'])}, impure null "
                   f"{_pct(r['impure_null'])}: "
                   + ("both within" if all(ok) else "not both within")
                   + f" {100 * tolerance:.1f} points of nominal")
    return out


# ------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.credit.truth_check",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/truth_check", help="output folder (truth_check.json, .csv)")
    p.add_argument("--batches", type=int, default=40,
                   help="batches (cells); rates' SEs come from their spread, so at least 2")
    p.add_argument("--goals", type=int, default=12, help="worlds per batch")
    p.add_argument("--group-size", type=int, default=6, help="G: recorded episodes per world")
    p.add_argument("--k", type=int, nargs="+", default=[8, 32],
                   help="continuations per distinct state (plain) and per stratum (strata)")
    p.add_argument("--truths", nargs="+", choices=TRUTHS, default=list(TRUTHS),
                   help="plain: mc_truth's continuations per distinct state; strata: strata.py's control "
                        "variate, continuations per distinct state and recorded action")
    p.add_argument("--rules", nargs="+", default=["floor", mc_noise.SE_RULE, "sample"],
                   help="SE rules of the plain truth compared (mc_noise.SE_RULES, or pooled:NU for another "
                        f"prior weight); the strata truth's is {STRATA_RULE}")
    p.add_argument("--horizon", type=int, default=40, help="max steps per episode (returns are cut there)")
    p.add_argument("--rooms", type=int, default=5, help="rooms per world")
    p.add_argument("--stuck-prob", type=float, default=0.15, help="chance that a door sticks")
    p.add_argument("--route-bonus", type=float, default=1.5,
                   help="the policy's preference for the shortest route (lower: fewer wins)")
    p.add_argument("--gamma", type=float, default=0.95, help="discount")
    p.add_argument("--seed", type=int, default=0)
    return p


def check_args(args) -> None:
    for name, least in (("batches", 2), ("goals", 1), ("group_size", 1), ("horizon", 1)):
        if getattr(args, name) < least:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {least}; got {getattr(args, name)}")
    if min(args.k) < 2:
        raise ValueError(f"--k must be >= 2 (one continuation has no variance); got {args.k}")
    if not 0 <= args.stuck_prob < 1 or not 0 < args.gamma <= 1:
        raise ValueError(f"--stuck-prob must be in [0, 1) and --gamma in (0, 1]; got {args.stuck_prob}, "
                         f"{args.gamma}")
    for rule in args.rules:
        mc_noise.parse_rule(rule)
    if not args.truths or set(args.truths) - set(TRUTHS):
        raise ValueError(f"--truths must name some of {list(TRUTHS)}; got {args.truths}")


def run(args) -> list[dict]:
    check_args(args)
    truths = [t for t in TRUTHS if t in args.truths]
    t0 = time.perf_counter()
    per_k = {k: [] for k in args.k}
    for i in range(args.batches):
        batch = sample_batch(args, np.random.default_rng([args.seed, i]))
        setup = strata_of(batch, args.gamma) if "strata" in truths else None
        for k in args.k:
            cell = {}
            if "plain" in truths:
                rng = np.random.default_rng([args.seed, i, k])
                samples = continuations(batch, k, args.horizon, args.gamma, rng)
                cell["plain"] = check_batch(batch, samples, args.rules, args.gamma)
            if setup is not None:
                rng = np.random.default_rng([args.seed, i, k, 1])
                store, played = strata_continuations(batch, setup, k, args.horizon, args.gamma, rng)
                cell["strata"] = check_strata(batch, setup, store, played, args.gamma)
            per_k[k].append(cell)
    rules = {"plain": args.rules, "strata": [STRATA_RULE]}
    records = [rec for k in args.k for truth in truths
               for rec in summarise([c[truth] for c in per_k[k]], k, rules[truth], truth)]
    seconds = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setting = {k: v for k, v in vars(args).items() if k != "out"}
    (out / "truth_check.json").write_text(json.dumps(
        {"setting": setting, "seconds": seconds, "records": records,
         "per_batch": {str(k): v for k, v in per_k.items()}}, indent=1))
    with open(out / "truth_check.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(records[0]))
        w.writeheader()
        w.writerows(records)
    print(f"{args.batches} batches x {args.goals} worlds x G={args.group_size}, horizon {args.horizon}, "
          f"{args.rooms} rooms, stuck {args.stuck_prob}, route bonus {args.route_bonus}, gamma {args.gamma}, "
          f"seed {args.seed}; {records[0]['rows']} rows per K")
    print(tables(records))
    print("\n".join(nominal_verdict(records)))
    print(f"wrote {out / 'truth_check.json'}, {out / 'truth_check.csv'} in {seconds:.1f} s")
    return records


def main(argv=None) -> list[dict]:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    main()
