"""The Monte-Carlo truth's noise (``mc_truth.py``): each state's sample statistics, the standard error its
value claims, and how much of the advantages' spread is noise.

    samples = Samples.of(plan, store, invalid_penalty)        # every continuation's return, by start
    rho = unbiased_reliability(plan, store, reward, valid, gamma, invalid_penalty)
    r_half, rho_sb = split_half_reliability(plan, store, reward, valid, gamma, invalid_penalty)
    disattenuate(corr(estimate, truth.adv), rho)              # the correlation with the noise-free A

Reliability. The estimators' advantages carry none of the truth's sampling noise, so the noise e in the MC
advantage A_hat = A + e only attenuates a correlation with it: corr(x, A_hat) = corr(x, A) sqrt(var(A) /
var(A_hat)) + (a term of mean 0). The reliability is that factor squared, rho = var(A) / var(A_hat) over the
batch's rows (ddof 1): the share of the observed spread of A_hat that is spread of A. Both estimates here
use the per-state sample variances as they are (ddof 1, no floor): a floor is a claim about uncertainty for
a test, and it biases a variance budget (the old floor made the printed reliability -1.42 on ALFWorld).

Standard errors (``SE_RULES``; ``truth_check.py`` measures them against dynamic programming). K = 8
returns that are mostly 0 or a discounted win give a sample variance that is often 0 (all K agree) and
always noisy, so the plain ``sample`` SE lets a 0 advantage through |A| > 2 SE 8-42% of the time instead of
4.55%. The old ``floor`` (the SE of a Beta(1, 1) win rate times the batch's largest return, as a minimum)
errs the other way: 0.4%, and the chi-square impurity test flags 0.4% of equal-value groups, not 5%.
``pooled``, the default, gives each state's variance a prior: the batch's pooled within-state variance
s0^2 worth ``NU0`` degrees of freedom, s2_post = (NU0 s0^2 + (K - 1) s^2) / (NU0 + K - 1), SE =
sqrt(s2_post / K). A state whose K samples all agree then claims the pool's variance shrunk by its own
K - 1 zero deviations, never 0; a noisy s^2 gains NU0 degrees of freedom. Both tests land at 4.3-5.7% at
K = 8 and 32 on three kinds of text MDP (3.0-3.5% where few win: groups whose continuations all lost
cannot be flagged by any SE), and NU0 = 2 or 8 move them by under a point. With equal K it leaves the mean
variance unchanged, so a reliability from its SEs stays near the unbiased one. (Also measured, and left
out as too conservative: the Beta floor with each state's own largest return, 1.6% and 1.8% at K = 8, and
with an empirical-Bayes Beta prior fitted to the states' win counts, 3.4% and 3.7%.)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NU0 = 4.0            # prior degrees of freedom of ``pooled``: measured by truth_check, 2 to 8 alike
SE_RULE = "pooled"


@dataclass(frozen=True)
class Samples:
    """Every continuation's return, by the start it was played from (the store's order within a start).

    ``v`` counts a return as V does (discounted reward, the invalid penalty subtracted when its first action
    was invalid), ``w`` as W does (no penalty: the value after an action); ``won`` its outcome."""
    start: np.ndarray
    v: np.ndarray
    w: np.ndarray
    won: np.ndarray
    n_starts: int

    @classmethod
    def of(cls, plan, store, invalid_penalty: float) -> "Samples":
        """The samples of ``store`` (a ``ContinuationStore``) for every start of ``plan``; a start with
        fewer than two continuations is refused (one sample has no variance)."""
        start, disc, inv, won = [], [], [], []
        for j, key in enumerate(plan.keys):
            recs = store.samples.get(key, [])
            if len(recs) < 2:
                raise ValueError(f"start {j} ({key[:8]}) has {len(recs)} continuation(s); run_continuations "
                                 "first (two or more give a standard error)")
            start += [j] * len(recs)
            disc += [r["disc"] for r in recs]
            inv += [r["invalid"] for r in recs]
            won += [r["won"] for r in recs]
        disc = np.asarray(disc, dtype=float)
        return cls(np.asarray(start, dtype=int), disc - invalid_penalty * np.asarray(inv, dtype=float), disc,
                   np.asarray(won, dtype=bool), len(plan.keys))

    def half(self, h: int) -> "Samples":
        """The even (h = 0) or odd (h = 1) positions of each start's continuations: two disjoint halves."""
        order = np.argsort(self.start, kind="stable")
        first = np.searchsorted(self.start[order], self.start[order])      # a start's first position
        pos = np.empty(len(order), dtype=int)
        pos[order] = np.arange(len(order)) - first
        keep = pos % 2 == h
        return Samples(self.start[keep], self.v[keep], self.w[keep], self.won[keep], self.n_starts)


@dataclass(frozen=True)
class StartStats:
    """Per start: how many continuations, how many won, the mean and the unbiased (ddof 1) variance of its
    returns as V and as W count them, their covariance, and the largest |return| seen from it."""
    count: np.ndarray
    wins: np.ndarray
    v_mean: np.ndarray
    v_var: np.ndarray
    w_mean: np.ndarray
    w_var: np.ndarray
    vw_cov: np.ndarray
    top: np.ndarray


def start_stats(samples: Samples, min_count: int = 2) -> StartStats:
    """``StartStats`` of every start. Each needs ``min_count`` continuations: two for a variance (K < 2 is
    refused); the split halves ask for one and use only the means (their variances are then NaN)."""
    n, j = samples.n_starts, samples.start
    if len(j) and (j.min() < 0 or j.max() >= n):
        raise ValueError(f"sample starts must lie in 0..{n - 1}; got {j.min()}..{j.max()}")
    count = np.bincount(j, minlength=n).astype(float)
    if n and count.min() < min_count:
        bad = np.flatnonzero(count < min_count)
        have = count[bad[:5]].astype(int).tolist()
        raise ValueError(f"starts {bad[:5].tolist()} have {have} continuation(s); {min_count} or more are "
                         "needed (K >= 2: one sample has no variance)")
    v_mean = np.bincount(j, weights=samples.v, minlength=n) / count
    w_mean = np.bincount(j, weights=samples.w, minlength=n) / count
    dv, dw = samples.v - v_mean[j], samples.w - w_mean[j]
    dof = count - 1

    def cov(x, y):
        return np.where(dof > 0, np.bincount(j, weights=x * y, minlength=n) / np.maximum(dof, 1), np.nan)

    top = np.zeros(n)
    np.maximum.at(top, j, np.abs(samples.w))
    return StartStats(count, np.bincount(j, weights=samples.won.astype(float), minlength=n), v_mean,
                      cov(dv, dv), w_mean, cov(dw, dw), cov(dv, dw), top)


# ------------------------------------------------------------------------------------ rows
def next_values(row_next: np.ndarray, per_start: np.ndarray) -> np.ndarray:
    """Per row, a per-start value at s_{t+1}; 0 after the episode's last row."""
    return np.where(row_next >= 0, per_start[np.maximum(row_next, 0)], 0.0)


def row_q(row_next: np.ndarray, w: np.ndarray, reward, valid, gamma: float, invalid_penalty: float):
    """Q(s_t, a_t) = r_t - c [a_t invalid] + gamma W(s_{t+1}) per row, from per-start values W (deterministic
    transitions: a_t in s_t leads to the recorded s_{t+1})."""
    reward, valid = np.asarray(reward, dtype=float), np.asarray(valid, dtype=bool)
    return reward - invalid_penalty * (~valid) + gamma * next_values(row_next, w)


def row_advantage(plan, stats: StartStats, reward, valid, gamma: float, invalid_penalty: float):
    """(Q, V, A) per row from the per-start means."""
    q = row_q(plan.row_next, stats.w_mean, reward, valid, gamma, invalid_penalty)
    v = stats.v_mean[plan.row_start]
    return q, v, q - v


def row_noise(plan, stats: StartStats, gamma: float) -> np.ndarray:
    """Per row, the unbiased sampling variance of A_hat: s^2_V(s_t) / K + gamma^2 s^2_W(s_{t+1}) / K' (the two
    states' continuations are disjoint, so independent), no floor; 0 for s_{t+1} after the last row."""
    return ((stats.v_var / stats.count)[plan.row_start]
            + gamma ** 2 * next_values(plan.row_next, stats.w_var / stats.count))


def noise_in_variance(plan, stats: StartStats, gamma: float) -> float:
    """The noise's part of var(A_hat, ddof 1) over the rows, estimated without bias:
    E var(A_hat) = var(A) + [sum_i var(e_i) - var(sum_i e_i) / n] / (n - 1), e_i = A_hat_i - A_i.
    Rows share states (a goal's episodes share s_0; row t's s_{t+1} is row t+1's s_t), so their errors
    correlate; var(sum e) adds them up state by state from the per-start (co)variances (ddof 1)."""
    n = len(plan.row_start)
    if n < 2:
        return float("nan")
    m = stats.count
    n_v = np.bincount(plan.row_start, minlength=len(m)).astype(float)             # rows acting in j
    n_w = np.bincount(plan.row_next[plan.row_next >= 0], minlength=len(m)).astype(float)  # rows reaching j
    # sum_i e_i = sum_j (gamma n_w[j] err_W[j] - n_v[j] err_V[j]), independent across states j
    var_sum = float(np.sum((n_v ** 2 * stats.v_var + gamma ** 2 * n_w ** 2 * stats.w_var
                            - 2 * gamma * n_v * n_w * stats.vw_cov) / m))
    return (float(np.sum(row_noise(plan, stats, gamma))) - var_sum / n) / (n - 1)


def reliability_of(adv: np.ndarray, noise: float) -> float:
    """1 - noise / var(A_hat, ddof 1); NaN when A_hat does not vary."""
    total = float(np.var(adv, ddof=1)) if len(adv) > 1 else 0.0
    return 1.0 - noise / total if total > 0 else float("nan")


def samples_for(plan, store, invalid_penalty: float) -> Samples:
    """``store`` as ``Samples`` of ``plan``'s starts: a ``ContinuationStore`` is read (``Samples.of``), drawn
    ``Samples`` are checked to be the plan's."""
    if not isinstance(store, Samples):
        return Samples.of(plan, store, invalid_penalty)
    if store.n_starts != len(plan.keys):
        raise ValueError(f"the samples are of {store.n_starts} starts, the plan has {len(plan.keys)}")
    return store


def unbiased_reliability(plan, store, reward, valid, gamma: float, invalid_penalty: float) -> float:
    """rho = var(A) / var(A_hat) over the rows (ddof 1), estimated as 1 - D / var(A_hat): D, the noise's part
    of var(A_hat), is estimated without bias from the per-state sample variances (``noise_in_variance``), so
    var(A_hat) - D is an unbiased estimate of var(A); the ratio is consistent, not exactly unbiased, and
    falls below 0 where noise is most of the spread. ``store``: a ``ContinuationStore``, or the ``Samples``
    drawn from one."""
    stats = start_stats(samples_for(plan, store, invalid_penalty))
    adv = row_advantage(plan, stats, reward, valid, gamma, invalid_penalty)[2]
    return reliability_of(adv, noise_in_variance(plan, stats, gamma))


def split_half_reliability(plan, store, reward, valid, gamma: float, invalid_penalty: float
                           ) -> tuple[float, float]:
    """(r, Spearman-Brown 2r / (1 + r)): r = corr(A_1, A_2) of the advantages computed from each half of
    every state's continuations alone (even and odd positions in the store's order). The halves' noises are
    independent, so r estimates the reliability at K/2 samples and Spearman-Brown steps it up to K (exact
    for equal halves; an odd K's halves differ by one). NaN when a half's A does not vary."""
    advs = split_half_advantages(plan, store, reward, valid, gamma, invalid_penalty)
    if min(float(np.std(a)) for a in advs) == 0:
        return float("nan"), float("nan")
    r = float(np.corrcoef(*advs)[0, 1])
    return r, 2 * r / (1 + r)


def split_half_advantages(plan, store, reward, valid, gamma: float, invalid_penalty: float) -> list:
    """[A from the even positions of every state's continuations, A from the odd ones]."""
    samples = samples_for(plan, store, invalid_penalty)
    start_stats(samples)                                          # K >= 2 everywhere, or a ValueError
    return [row_advantage(plan, start_stats(samples.half(h), min_count=1), reward, valid, gamma,
                          invalid_penalty)[2] for h in (0, 1)]


def disattenuate(r: float, reliability: float) -> float:
    """The correlation of an estimate with the noise-free A from its correlation ``r`` with the MC A_hat:
    r / sqrt(reliability), since only the truth carries sampling noise. NaN when the reliability is not
    positive (or not finite): then the noise swamps A and the correlation says nothing."""
    ok = np.isfinite(reliability) and reliability > 0
    return float(r / np.sqrt(reliability)) if ok else float("nan")


# ------------------------------------------------------------------------------------ standard errors
def se_floor(wins: np.ndarray, n: np.ndarray, scale) -> np.ndarray:
    """The standard error of a win rate under a Beta(1, 1) prior, sqrt(p (1 - p) / n) with
    p = (wins + 1) / (n + 2), times ``scale`` (a return); positive even when every sample agrees."""
    wins, n = np.asarray(wins, dtype=float), np.asarray(n, dtype=float)
    p = (wins + 1) / (n + 2)
    return scale * np.sqrt(p * (1 - p) / n)


def _floor_se(stats: StartStats, var: np.ndarray) -> np.ndarray:
    """The old rule: the sample SE, at least the Beta(1, 1) win-rate SE times the batch's largest return."""
    return np.maximum(np.sqrt(var / stats.count), se_floor(stats.wins, stats.count, stats.top.max(initial=0)))


def _sample_se(stats: StartStats, var: np.ndarray) -> np.ndarray:
    """No floor: 0 where all K agree (what the reliability uses, never what a test should)."""
    return np.sqrt(var / stats.count)


def pooled_se(stats: StartStats, var: np.ndarray, nu0: float = NU0) -> np.ndarray:
    """sqrt(s2_post / K), s2_post = (nu0 s0^2 + (K - 1) s^2) / (nu0 + K - 1), s0^2 the pooled within-state
    variance of the batch (each state weighted by its K - 1). Where no state's continuations vary at all,
    the pool knows no scale: s0^2 is then the variance of the batch's Beta(1, 1) pooled win rate times its
    largest return (0 only when nothing was ever won, as the old floor)."""
    dof = stats.count - 1
    prior = float(np.sum(dof * var) / np.sum(dof)) if np.sum(dof) > 0 else 0.0
    if prior == 0:
        total = float(np.sum(stats.count))
        prior = float(se_floor(np.sum(stats.wins), total, stats.top.max(initial=0)) ** 2 * total)
    return np.sqrt((nu0 * prior + dof * var) / (nu0 + dof) / stats.count)


SE_RULES = {"pooled": pooled_se, "floor": _floor_se, "sample": _sample_se}


def parse_rule(rule: str) -> tuple[str, float]:
    """(name, prior weight) of an SE rule: a name of ``SE_RULES``, or ``pooled:NU`` for NU > 0 prior degrees
    of freedom (``NU0`` by default)."""
    name, _, arg = rule.partition(":")
    if name not in SE_RULES or (arg and name != "pooled"):
        raise ValueError(f"unknown SE rule {rule!r}; known: {sorted(SE_RULES)}, or pooled:NU")
    try:
        nu0 = float(arg) if arg else NU0
    except ValueError:
        nu0 = float("nan")
    if not (np.isfinite(nu0) and nu0 > 0):
        raise ValueError(f"SE rule {rule!r}: NU must be a finite number > 0")
    return name, nu0


def start_se(rule: str, stats: StartStats) -> tuple[np.ndarray, np.ndarray]:
    """(SE of V, SE of W) per start by ``rule`` (``parse_rule``)."""
    name, nu0 = parse_rule(rule)
    if name == "pooled":
        return pooled_se(stats, stats.v_var, nu0), pooled_se(stats, stats.w_var, nu0)
    return SE_RULES[name](stats, stats.v_var), SE_RULES[name](stats, stats.w_var)
