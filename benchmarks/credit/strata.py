"""Monte-Carlo truth with a known policy's own action probabilities as a control variate: the scripted
policy says exactly how likely each action is, so V(s) need not be sampled whole.

    plan = plan_strata(episodes_of(ro, tasks, seeds), probs)    # probs: pi(a_t | s_t) of every row
    store = ContinuationStore(out / "strata.jsonl")
    run_continuations(plan, k, play, store, chunk, gamma)   # mc_truth's; jobs end with the action to avoid
    truth = strata_truth(plan, store, reward, gamma)

Why: A(s_t, a_t) = Q(s_t, a_t) - V(s_t), and V(s_t) = pi_t Q(s_t, a_t) + (1 - pi_t) Qbar_t, where pi_t is
the probability of the recorded action a_t and Qbar_t the expected return of the policy's first action
drawn from every other action (renormalised). So

    A_t = (1 - pi_t) (Q(s_t, a_t) - Qbar_t),    Q(s_t, a_t) = r_t + gamma W(s_{t+1}),
    W(s_t) = pi_t (r_t + gamma W(s_{t+1})) + (1 - pi_t) Qbar_t     (0 after the episode's last row),

and only Qbar_t is sampled: K continuations from s_t whose first action is drawn from the policy given that
it is not a_t (a "stratum": one per distinct state and recorded action). The recorded action's own branch
is the episode's next state, estimated down the episode the same way. Where the policy took the expert's
action (pi_t = 1 - eps + eps/n, most rows), the sampling noise of A_t is scaled by (1 - pi_t); plain
continuations from s_t carry the whole noise of V(s_t). Where pi_t = 1 there is nothing to sample: A_t = 0.
Scripted policies only: a model's pi over whole responses is not a distribution over env actions. Like the
plain truth's Q, it takes the recorded a_t to lead to the recorded s_{t+1}: true of the envs here, whose
steps are deterministic given the episode's seed (replay checks every observation). Where an action's
outcome were random, (1 - pi_t)(Q_recorded - Qbar_t) would miss A by pi_t (Q_recorded - Q(s_t, a_t));
``truth_check.py`` measures that on text MDPs with sticking doors, and finds none with fixed ones.

Variances: var(A_t) = (1 - pi_t)^2 (gamma^2 var W(s_{t+1}) + var Qbar_t), var W(s_t) = pi_t^2 gamma^2
var W(s_{t+1}) + (1 - pi_t)^2 var Qbar_t, each stratum's var Qbar its sample variance over K
shrunk toward the batch's pooled variance for the SE, as the plain truth's (``mc_noise.pooled_se``), and
left as it is for the reliability. Split-half: the same estimator on each half of every stratum's
continuations.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from benchmarks.credit.mc_noise import NU0, Samples, StartStats, pooled_se, reliability_of, start_stats
from benchmarks.credit.mc_truth import ContinuationStore, Episode, Truth, plan_starts

PI_ONE = 1 - 1e-9           # a recorded action at least this likely leaves nothing to sample beside it


@dataclass
class StrataPlan:
    """One stratum per distinct (state, recorded action) with pi < 1; what ``run_continuations`` needs
    (``starts``, ``keys``, ``job``) and how rows chain down their episodes."""
    episodes: list
    starts: list                  # (episode, t) of each stratum's first row
    keys: list
    exclude: list                 # the recorded action each stratum's first action avoids
    row_stratum: np.ndarray       # per row: its stratum, -1 where pi = 1
    row_prob: np.ndarray          # per row: pi(a_t | s_t)
    row_next: np.ndarray          # per row: the next row of its episode, -1 after the last
    row_state: np.ndarray         # per row: its distinct state (mc_truth.plan_starts' index)

    def job(self, j: int):
        e, t = self.starts[j]
        ep = self.episodes[e]
        return ep.task, ep.seed, ep.replay(t), t, self.exclude[j]


def plan_strata(episodes: list[Episode], probs) -> StrataPlan:
    """The strata of a recorded batch; ``probs`` the recorded actions' probabilities, by batch row."""
    probs = np.asarray(probs, dtype=float)
    if not np.all((probs > 0) & (probs <= 1 + 1e-12)):
        raise ValueError("plan_strata needs each recorded action's probability in (0, 1]: a scripted batch's "
                         "exp(old_logp_sum)")
    states = plan_starts(episodes)
    n_rows = len(states.row_start)
    row_stratum, row_next = np.full(n_rows, -1), np.full(n_rows, -1)
    index, starts, keys, exclude = {}, [], [], []
    for e, ep in enumerate(episodes):
        for t, row in enumerate(ep.rows):
            row_next[row] = ep.rows[t + 1] if t + 1 < len(ep.rows) else -1
            if probs[row] >= PI_ONE:
                continue
            key = hashlib.sha1(f"{ep.start_key(t)}|not|{ep.actions[t]}".encode()).hexdigest()
            if key not in index:
                index[key] = len(starts)
                starts.append((e, t))
                keys.append(key)
                exclude.append(ep.actions[t])
            row_stratum[row] = index[key]
    return StrataPlan(episodes, starts, keys, exclude, row_stratum, np.minimum(probs, 1.0), row_next,
                      states.row_start)


def stratum_stats(plan: StrataPlan, store: ContinuationStore, half: int | None = None) -> StartStats:
    """Per stratum: the count, wins, mean and (ddof 1) variance of its continuations' returns
    (``mc_noise.start_stats``; scripted rows are valid, so V and W count alike); ``half`` 0 or 1 keeps the
    even or odd positions of each stratum's continuations (the split-half check)."""
    samples = Samples.of(plan, store, invalid_penalty=0.0)
    if half is not None:
        return start_stats(samples.half(half), min_count=1)
    return start_stats(samples)


def chain(plan: StrataPlan, reward, gamma: float, mean: np.ndarray, var_mean: np.ndarray):
    """Per row: Q(s_t, a_t), W(s_t), A_t and var(A_t), var(W(s_t)), by the recursion of the module
    docstring, run backwards down every episode."""
    reward = np.asarray(reward, dtype=float)
    n = len(reward)
    q, w, adv, var_a, var_w = (np.zeros(n) for _ in range(5))
    for ep in plan.episodes:
        w_next = var_next = 0.0
        for row in reversed(ep.rows):
            p, j = plan.row_prob[row], plan.row_stratum[row]
            qbar, var_qbar = (mean[j], var_mean[j]) if j >= 0 else (0.0, 0.0)
            q[row] = reward[row] + gamma * w_next
            adv[row] = (1 - p) * (q[row] - qbar)
            var_a[row] = (1 - p) ** 2 * (gamma ** 2 * var_next + var_qbar)
            w[row] = p * q[row] + (1 - p) * qbar
            var_w[row] = p ** 2 * gamma ** 2 * var_next + (1 - p) ** 2 * var_qbar
            w_next, var_next = w[row], var_w[row]
    return q, w, adv, var_a, var_w


def strata_truth(plan: StrataPlan, store: ContinuationStore, reward, gamma: float, nu0: float = NU0) -> Truth:
    """mc_truth's ``Truth`` from the strata (scripted rows are all valid: V = W). ``se`` uses each
    stratum's variance shrunk toward the batch's pooled one (``mc_noise.pooled_se``, the rule the plain truth
    uses; measured by ``truth_check``), ``noise_var`` the unshrunk sample variances (what a reliability
    needs). Each distinct state's value and SE (``v_start``, ``se_start``: the impurity test's) are those of
    the first row reaching it."""
    stats = stratum_stats(plan, store)
    mean = stats.w_mean
    q, w, adv, var_a, var_w = chain(plan, reward, gamma, mean, pooled_se(stats, stats.w_var, nu0) ** 2)
    noise = chain(plan, reward, gamma, mean, stats.w_var / stats.count)[3]
    n_states = int(plan.row_state.max()) + 1 if len(plan.row_state) else 0
    first = np.full(n_states, -1)
    for row in range(len(adv) - 1, -1, -1):
        first[plan.row_state[row]] = row
    j = plan.row_stratum
    n = np.where(j >= 0, stats.count[np.maximum(j, 0)], 0)
    win_rate = np.where(j >= 0, (stats.wins / stats.count)[np.maximum(j, 0)], np.nan)
    return Truth(q=q, v=w, adv=adv, se=np.sqrt(var_a), n=n, v_se=np.sqrt(var_w), win_rate=win_rate,
                 v_start=w[first], se_start=np.sqrt(var_w[first]), row_start=plan.row_state, noise_var=noise)


def split_half_advantages(plan: StrataPlan, store: ContinuationStore, reward, gamma: float):
    """A from the even-numbered and from the odd-numbered continuations of every stratum (the two halves of
    a split-half reliability check)."""
    halves = []
    for h in (0, 1):
        stats = stratum_stats(plan, store, half=h)
        halves.append(chain(plan, reward, gamma, stats.w_mean, np.zeros_like(stats.w_mean))[2])
    return halves


def strata_reliability(plan: StrataPlan, store: ContinuationStore, reward, gamma: float
                       ) -> tuple[float, float]:
    """(unbiased reliability 1 - mean(noise) / var(A_hat), split-half Spearman-Brown) of the strata truth.
    The first ignores that rows sharing a stratum share its error (small on a batch's hundreds of rows);
    the second is the check."""
    truth = strata_truth(plan, store, reward, gamma)
    unbiased = reliability_of(truth.adv, float(np.mean(truth.noise_var)))
    a, b = split_half_advantages(plan, store, reward, gamma)
    if min(np.std(a), np.std(b)) == 0:
        return unbiased, float("nan")
    r = float(np.corrcoef(a, b)[0, 1])
    return unbiased, 2 * r / (1 + r)
