"""Does the Monte-Carlo truth measure its own noise right, and does its standard error keep its promises?
Checked on text MDPs, where dynamic programming gives the exact truth.

    python -m benchmarks.credit.truth_check [--out runs/truth_check --batches 40 --goals 12 \
        --group-size 6 --k 8 32 --truths plain strata --rules floor pooled sample --horizon 40]

``advantage_accuracy.py`` scores estimators against the MC advantage A_hat = Q_hat - V_hat of
``mc_truth.py`` and reads three things off its noise: the reliability var(A) / var(A_hat) (how much a
correlation with A_hat is attenuated), the rows with |A_hat| > 2 SE (the sign column), and the same-state
test of ``advantage_report.impure_rows`` (a step group's distinct states, each value with its SE, tested
for one common value at 5%). This harness plays the same pipeline on ``text_mdp`` worlds and compares with
the exact values:

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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.credit import mc_noise
from benchmarks.credit.mc_truth import Episode, plan_starts, truth_of
from benchmarks.credit.text_mdp import make_world, rollout, solve

Z_NOMINAL = 0.0455          # P(|N(0, 1)| > 2)
CHI2_NOMINAL = 0.05
TRUTHS = ("plain", "strata")
STRATA_RULE = "pooled"      # strata_truth's SE: mc_noise.pooled_se with NU0


# ------------------------------------------------------------------------------------ worlds
@dataclass
class Tables:
    """A batch's worlds as padded arrays [world, state, action(, outcome)], for vectorised play."""
    pi: np.ndarray               # policy probabilities (0 past a state's actions)
    n_act: np.ndarray            # [world, state] number of actions
    p_first: np.ndarray          # probability of the first outcome (a door that opens)
    nxt: np.ndarray              # [..., 2] next latent state
    rew: np.ndarray
    done: np.ndarray


def tables_of(worlds: list) -> Tables:
    n_s = max(w.n_states for w in worlds)
    n_a = max(len(w.actions(s)) for w in worlds for s in range(w.n_states))
    shape = (len(worlds), n_s, n_a)
    pi, p_first, n_act = np.zeros(shape), np.ones(shape), np.ones(shape[:2], dtype=int)
    nxt, rew, done = np.zeros(shape + (2,), dtype=int), np.zeros(shape + (2,)), np.zeros(shape + (2,), bool)
    for i, world in enumerate(worlds):
        for s in range(world.n_states):
            acts = world.actions(s)
            n_act[i, s] = len(acts)
            pi[i, s, :len(acts)] = world.policy(s)
            for a in range(len(acts)):
                outs = world.outcomes(s, a)
                outs = outs + outs[:1] * (2 - len(outs))
                p_first[i, s, a] = outs[0][0] if outs[1] is not outs[0] else 1.0
                for o, (_, s2, r, d, _) in enumerate(outs):
                    nxt[i, s, a, o], rew[i, s, a, o], done[i, s, a, o] = s2, r, d
    return Tables(pi, n_act, p_first, nxt, rew, done)


def first_action(tables: Tables, w: np.ndarray, s: np.ndarray, u: np.ndarray, exclude: np.ndarray
                 ) -> np.ndarray:
    """The first action of strata continuations: per entry, the policy's draw (by the uniform ``u``) given
    that it is not action index ``exclude`` (its probability renormalised over the rest; -1 excludes
    nothing). The action is excluded, not its outcome: a door that may stick is never tried."""
    p = tables.pi[w, s].copy()
    ex = np.flatnonzero(exclude >= 0)
    p[ex, exclude[ex]] = 0.0
    cum = np.cumsum(p, axis=1)
    total = cum[:, -1]
    if np.any(total <= 0):
        raise ValueError("a strata continuation from a state whose recorded action has probability 1: "
                         "nothing to condition on (plan_strata gives such rows no stratum)")
    x = np.minimum(u * total, np.nextafter(total, 0))
    return (x[:, None] >= cum).sum(axis=1)        # the first action whose cumsum exceeds x: never p = 0


def play(tables: Tables, world: np.ndarray, state: np.ndarray, t: np.ndarray, horizon: int, gamma: float,
         rng: np.random.Generator, exclude: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One continuation per entry: the world's policy from latent ``state`` at time ``t`` until the win or
    the horizon; (discounted reward sum from its first step, won). ``exclude``: per entry an action index
    the first action is drawn without (``first_action``: a stratum's continuation), -1 for none."""
    state, t = state.copy(), t.copy()
    disc, factor, won = np.zeros(len(state)), np.ones(len(state)), np.zeros(len(state), dtype=bool)
    live = np.flatnonzero(t < horizon)
    first = exclude is not None
    while len(live):
        w, s = world[live], state[live]
        if first:
            a = first_action(tables, w, s, rng.random(len(live)), np.asarray(exclude)[live])
            first = False
        else:
            cum = np.cumsum(tables.pi[w, s], axis=1)
            a = np.minimum((rng.random(len(live))[:, None] > cum).sum(axis=1), tables.n_act[w, s] - 1)
        o = (rng.random(len(live)) >= tables.p_first[w, s, a]).astype(int)
        r, d = tables.rew[w, s, a, o], tables.done[w, s, a, o]
        disc[live] += factor[live] * r
        factor[live] *= gamma
        won[live] |= d & (r > 0)
        state[live], t[live] = tables.nxt[w, s, a, o], t[live] + 1
        live = live[~d & (t[live] < horizon)]
    return disc, won


def moments(world, horizon: int, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """(V, M2)[t, s] for t = 0..horizon (row horizon = 0): the mean and second moment of the discounted
    return from latent s at time t under the world's policy (the return's variance is M2 - V^2)."""
    V, M2 = np.zeros((horizon + 1, world.n_states)), np.zeros((horizon + 1, world.n_states))
    for t in range(horizon - 1, -1, -1):
        for s in range(world.n_states):
            pi = world.policy(s)
            for a in range(len(pi)):
                for p, s2, r, done, _ in world.outcomes(s, a):
                    v2, m2 = (0.0, 0.0) if done else (V[t + 1, s2], M2[t + 1, s2])
                    V[t, s] += pi[a] * p * (r + gamma * v2)
                    M2[t, s] += pi[a] * p * (r * r + 2 * r * gamma * v2 + gamma ** 2 * m2)
    return V, M2


@dataclass
class Batch:
    """One batch's plan with, per row and per start, what the exact check needs."""
    plan: object
    reward: np.ndarray
    a_true: np.ndarray           # per row, exact A (DP)
    noise_true: np.ndarray       # per row, var(return from s_t) + gamma^2 var(return from s_{t+1}), exact
    var_v: np.ndarray            # per start, exact variance of one return from it
    tables: Tables
    start_world: np.ndarray      # per start: world, latent state, time
    start_state: np.ndarray
    start_t: np.ndarray
    row_where: np.ndarray        # per row: world, time, latent state, action index
    worlds: list
    row_pi: np.ndarray           # per row: pi(a_t | s_t), exact
    row_qbar: np.ndarray         # per row: mean and variance of one return from (t, s_t) whose first action
    row_qbar_var: np.ndarray     # is the policy's given it is not a_t (``conditioned_values``; 0 at pi = 1)


def sample_batch(args, rng: np.random.Generator) -> Batch:
    """``--goals`` worlds x ``--group-size`` episodes of each world's policy, planned as ``mc_truth`` plans a
    recorded batch, with the exact A of every row and the exact return variance of every start."""
    worlds, episodes, reward, a_true, row = [], [], [], [], 0
    values, where = [], []                     # per goal (V, M2); per row (goal, t, s, a)
    for g in range(args.goals):
        world = make_world(rng, n_rooms=args.rooms, stuck_prob=args.stuck_prob, route_bonus=args.route_bonus)
        worlds.append(world)
        V = np.vstack([solve(world, args.horizon, args.gamma)[0], np.zeros(world.n_states)])  # V[horizon] = 0
        values.append((V, moments(world, args.horizon, args.gamma)[1]))
        for _ in range(args.group_size):
            steps = rollout(world, args.horizon, rng, paraphrases=1)
            states = [st["state"] for st in steps]
            # the recorded next latent state (a door may stick); after the last row there is none
            nexts = states[1:] + [-1]
            actions = tuple(f"{st['action_text']}>{n}" for st, n in zip(steps, nexts))
            episodes.append(Episode(g, 0, actions, (), tuple(range(row, row + len(steps)))))
            for st, n in zip(steps, nexts):
                t, s = st["t"], st["state"]
                nxt_v = 0.0 if n < 0 else V[t + 1, n]
                reward.append(st["reward"])
                a_true.append(st["reward"] + args.gamma * nxt_v - V[t, s])
                where.append((g, t, s, st["action"]))
            row += len(steps)
    plan = plan_starts(episodes)
    start_world = np.array([episodes[e].task for e, _ in plan.starts])
    start_t = np.array([t for _, t in plan.starts])
    start_state = np.array([where[episodes[e].rows[t]][2] for e, t in plan.starts])
    var_v = np.array([values[g][1][t, s] - values[g][0][t, s] ** 2
                      for g, t, s in zip(start_world, start_t, start_state)])
    noise_true = var_v[plan.row_start] + args.gamma ** 2 * mc_noise.next_values(plan.row_next, var_v)
    tables, where = tables_of(worlds), np.array(where)
    row_pi, row_qbar, row_qbar_var = conditioned_values(tables, values, where, args.gamma)
    return Batch(plan, np.array(reward), np.array(a_true), noise_true, var_v, tables, start_world,
                 start_state, start_t, where, worlds, row_pi, row_qbar, row_qbar_var)


def conditioned_values(tables: Tables, values: list, where: np.ndarray, gamma: float):
    """Per row (``where``: world, t, s, action index): pi(a | s), and the exact mean and variance of one
    return from (t, s) whose first action is drawn from the policy given that it is not a (a stratum's
    continuation; both 0 where pi = 1), from the worlds' DP (V, M2)[t, s] (``values``, rows 0..horizon)."""
    n_w = len(values)
    n_t, n_s = max(v.shape[0] for v, _ in values), tables.pi.shape[1]
    V, M2 = np.zeros((n_w, n_t, n_s)), np.zeros((n_w, n_t, n_s))
    for i, (v, m2) in enumerate(values):
        V[i, :v.shape[0], :v.shape[1]], M2[i, :m2.shape[0], :m2.shape[1]] = v, m2
    w, t, s, a = (np.asarray(where, dtype=int).reshape(-1, 4).T if len(where) else
                  (np.zeros(0, dtype=int),) * 4)
    wi, ti = w[:, None, None], t[:, None, None] + 1
    live = ~tables.done[w, s]                                      # [row, action, outcome]
    v2 = np.where(live, V[wi, ti, tables.nxt[w, s]], 0.0)
    m2 = np.where(live, M2[wi, ti, tables.nxt[w, s]], 0.0)
    p_out = np.stack([tables.p_first[w, s], 1 - tables.p_first[w, s]], axis=-1)
    r = tables.rew[w, s]
    q1 = np.sum(p_out * (r + gamma * v2), axis=-1)                 # [row, action]: Q and its second moment
    q2 = np.sum(p_out * (r * r + 2 * gamma * r * v2 + gamma ** 2 * m2), axis=-1)
    pi = tables.pi[w, s].copy()
    rows = np.arange(len(w))
    pi_a = pi[rows, a].copy()
    pi[rows, a] = 0.0
    rest = pi.sum(axis=1)
    safe = np.where(rest > 1e-12, rest, 1.0)
    mean = np.where(rest > 1e-12, np.sum(pi * q1, axis=1) / safe, 0.0)
    second = np.where(rest > 1e-12, np.sum(pi * q2, axis=1) / safe, 0.0)
    return pi_a, mean, np.maximum(second - mean ** 2, 0.0)


def continuations(b: Batch, k: int, horizon: int, gamma: float, rng: np.random.Generator) -> mc_noise.Samples:
    """K continuations from every start of the batch, in start order."""
    start = np.repeat(np.arange(len(b.start_t)), k)
    disc, won = play(b.tables, b.start_world[start], b.start_state[start], b.start_t[start], horizon, gamma,
                     rng)
    return mc_noise.Samples(start, disc, disc, won, len(b.start_t))


# ------------------------------------------------------------------------------------ strata
@dataclass
class StrataSetup:
    """The batch's strata (``strata.plan_strata`` on the batch's episodes and exact pi) and what the exact
    check needs of them. Strata whose keys differ only in the excluded action's outcome (a door that stuck
    in one episode and opened in another, after one prefix) are one stratum of a deterministic env: they
    share one group's continuations, and the group is what is played."""
    plan: object                 # strata.StrataPlan
    group: np.ndarray            # per stratum: its group (distinct state and recorded action index)
    group_row: np.ndarray        # per group: a row of it (its world, t, s and the action to avoid)
    target: np.ndarray           # per row: the strata A's exact expectation (``chain`` of exact Qbar)
    noise1: np.ndarray           # per row: exact var of the strata A at K = 1 (divide by K)
    w_noise1: np.ndarray         # per distinct state: exact var of the W strata_truth reports, at K = 1


def strata_of(b: Batch, gamma: float) -> StrataSetup:
    """The batch's strata as the benchmark plans them (``plan_strata`` on the plain plan's episodes, with
    each row's exact pi), grouped, with their exact expectation and noise (``strata.chain`` of the exact
    per-stratum mean and variance of one conditioned return)."""
    from benchmarks.credit.strata import chain, plan_strata
    sp = plan_strata(b.plan.episodes, b.row_pi)
    first_row = np.array([sp.episodes[e].rows[t] for e, t in sp.starts], dtype=int)
    index: dict = {}
    group = np.array([index.setdefault((int(sp.row_state[r]), int(b.row_where[r, 3])), len(index))
                      for r in first_row], dtype=int)
    group_row = np.zeros(len(index), dtype=int)
    group_row[group] = first_row                                # any of a group's rows: one (world, t, s, a)
    exact = chain(sp, b.reward, gamma, b.row_qbar[first_row], b.row_qbar_var[first_row])
    target, noise1, w_var1 = exact[2], exact[3], exact[4]
    first = np.full(len(b.plan.starts), -1)
    for row in range(len(target) - 1, -1, -1):                   # strata_truth's: the first row reaching it
        first[sp.row_state[row]] = row
    return StrataSetup(sp, group, group_row, target, noise1, w_var1[first])


class MemoryStore:
    """What ``strata.stratum_stats`` reads of a ``mc_truth.ContinuationStore``: records by key."""

    def __init__(self):
        self.samples: dict[str, list] = {}

    def total(self) -> int:
        return sum(map(len, self.samples.values()))


def strata_continuations(b: Batch, st: StrataSetup, k: int, horizon: int, gamma: float,
                         rng: np.random.Generator) -> tuple[MemoryStore, int]:
    """K continuations per group of strata (first action conditioned on not being the recorded one), as a
    store of ``ContinuationStore`` records; and how many were played."""
    g = np.repeat(np.arange(len(st.group_row)), k)
    w, t, s, a = b.row_where[st.group_row[g]].T
    disc, won = play(b.tables, w, s, t, horizon, gamma, rng, exclude=a)
    per_group = [[] for _ in st.group_row]
    for gi, d, x in zip(g.tolist(), disc.tolist(), won.tolist()):
        per_group[gi].append((d, x))
    store = MemoryStore()
    for key, gi in zip(st.plan.keys, st.group.tolist()):
        store.samples[key] = [{"key": key, "disc": d, "won": x, "invalid": False} for d, x in per_group[gi]]
    return store, len(g)


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
