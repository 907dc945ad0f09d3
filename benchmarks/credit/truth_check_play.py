"""The text MDPs that ``truth_check.py`` checks the Monte-Carlo truth on, simulated: batches of ``text_mdp``
worlds played by their own stochastic policies and planned as ``mc_truth`` plans a recorded batch, with the
exact (dynamic programming) values the checks compare against, and the continuations both truths sample,
played for all starts at once on padded arrays of the worlds:

    b = sample_batch(args, rng)          # truth_check's settings; per row exact A, pi(a_t | s_t), Qbar
    samples = continuations(b, k, horizon, gamma, rng)         # plain: K per distinct state (mc_truth)
    st = strata_of(b, gamma)                                   # strata.plan_strata's, with exact targets
    store, played = strata_continuations(b, st, k, horizon, gamma, rng)   # K per group, for strata.py

Not run on its own: ``python -m benchmarks.credit.truth_check`` runs it (``--help`` for the settings).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.credit import mc_noise
from benchmarks.credit.mc_truth import Episode, plan_starts
from benchmarks.credit.text_mdp import make_world, rollout, solve


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
