"""Monte-Carlo ground truth of step advantages on recorded episodes, by deterministic replay.

    episodes = episodes_of(rollout, tasks, seeds)             # what replay needs of each recorded episode
    plan = plan_starts(episodes)                              # distinct states to sample from, per row
    store = ContinuationStore(out / "continuations.jsonl")   # finished continuations survive a stop
    run_continuations(plan, k=8, play=policy_play, store=store)
    truth = mc_truth(plan, store, rewards, valid, gamma=0.95, invalid_penalty=0.0)
    truth.adv, truth.se                                       # A = Q - V per row and its standard error

The state s_t of row (episode e, step t) is reached by resetting with e's task and seed and re-applying
its first t actions (``agents.replay``; every replayed observation is checked against the recorded one).
From s_t, K continuations with freshly sampled actions give V(s_t). The envs here are deterministic, so
taking a_t in s_t always leads to the recorded s_{t+1}: Q(s_t, a_t) = r_t - c [a_t invalid] + gamma
W(s_{t+1}), where W is the expected discounted reward from a state (V without its first row's penalty)
and W = 0 after the episode's last row (a win terminates; the horizon cuts returns without a bootstrap,
as the estimators' returns are cut). So one set of continuations per distinct state serves both the row's
V and the previous row's Q, and episodes that share a prefix (a group's G episodes share s_0) share it.
The values are those of the estimators' returns: discounted by gamma, the invalid-format penalty c
subtracted from the row's own return only (``estimators.step_returns``).
The recorded episode itself is not one of the samples: its return is what the estimators saw, and the
ground truth must not share their noise. Standard errors (``mc_noise.py``, measured against dynamic
programming by ``truth_check.py``): K continuations that all agree (all lost, or all won) do not make a
state's value certain, and K = 8 sample variances are noisy, so each state's variance gets a prior, the
batch's pooled within-state variance worth ``mc_noise.NU0`` samples (``se="pooled"``, the default); the
|A| > 2 SE sign set and the impurity test then keep their nominal error rates. ``se="floor"`` is the old
rule (the SE of a Beta(1, 1) win rate times the batch's largest return, as a minimum: far too wide);
``truth.noise_var`` is each row's unfloored sampling variance, what ``mc_noise.unbiased_reliability``
budgets.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from agents.dynamic_sampling import select_envs
from agents.replay import Replay, anchor_hash
from benchmarks.credit import mc_noise
from benchmarks.credit.mc_noise import SE_RULE, Samples, row_advantage, row_noise, start_se, start_stats
from benchmarks.credit.mc_noise import se_floor  # noqa: F401  (the old floor's formula, imported from here)


@dataclass(frozen=True)
class Episode:
    """One recorded episode: what replay needs (task, seed, parsed actions, anchor hashes of the states
    acted in) and where its rows are in the batch."""
    task: object
    seed: int
    actions: tuple
    anchors: tuple
    rows: tuple                   # batch row of each step, in step order

    def replay(self, t: int) -> Replay:
        """The replay reaching s_t (its first t actions, checked at every state up to s_t)."""
        return Replay(self.actions[:t], self.anchors[:t + 1])

    def start_key(self, t: int) -> str:
        """Equal for two episodes' states exactly when task, seed and action prefix agree."""
        raw = json.dumps([str(self.task), int(self.seed), list(self.actions[:t])])
        return hashlib.sha1(raw.encode()).hexdigest()


def episodes_of(ro, tasks, seeds) -> list[Episode]:
    """The episodes of an ``agents.rollout.Rollout`` whose env i played ``tasks[i]`` with ``seeds[i]``."""
    batch, out = ro.batch, []
    for i in range(len(tasks)):
        rows = np.flatnonzero(ro.env_index == i)
        rows = rows[np.argsort(batch.step_idx[rows], kind="stable")]
        out.append(Episode(tasks[i], int(seeds[i]), tuple(ro.actions[r] for r in rows),
                           tuple(anchor_hash(batch.anchor[r]) for r in rows), tuple(int(r) for r in rows)))
    return out


@dataclass
class StartPlan:
    """The distinct states to sample continuations from, and each batch row's states.

    ``starts[j] = (episode index, t)`` of one episode reaching state j; ``row_start[i]`` is row i's s_t and
    ``row_next[i]`` its s_{t+1} (-1 after the episode's last row)."""
    episodes: list
    starts: list
    keys: list
    row_start: np.ndarray
    row_next: np.ndarray

    def job(self, j: int):
        e, t = self.starts[j]
        ep = self.episodes[e]
        return ep.task, ep.seed, ep.replay(t), t


def plan_starts(episodes: list[Episode]) -> StartPlan:
    n_rows = 1 + max((r for ep in episodes for r in ep.rows), default=-1)
    index, starts, keys = {}, [], []
    row_start, row_next = np.full(n_rows, -1), np.full(n_rows, -1)
    for e, ep in enumerate(episodes):
        ids = []
        for t in range(len(ep.rows)):
            key = ep.start_key(t)
            if key not in index:
                index[key] = len(starts)
                starts.append((e, t))
                keys.append(key)
            ids.append(index[key])
        for t, row in enumerate(ep.rows):
            row_start[row] = ids[t]
            row_next[row] = ids[t + 1] if t + 1 < len(ids) else -1
    return StartPlan(episodes, starts, keys, row_start, row_next)


class ContinuationStore:
    """Finished continuations, one JSON line each ({key, disc, invalid, steps, won}), appended as chunks
    finish, so a stopped run continues from what it has."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.samples: dict[str, list] = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                if line.strip():
                    rec = json.loads(line)
                    self.samples.setdefault(rec["key"], []).append(rec)

    def count(self, key: str) -> int:
        return len(self.samples.get(key, ()))

    def total(self) -> int:
        return sum(map(len, self.samples.values()))

    def add(self, records: list[dict]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as f:
            for rec in records:
                f.write(json.dumps(rec) + "\n")
                self.samples.setdefault(rec["key"], []).append(rec)


def continuation_record(key: str, rewards, valid, won: bool, gamma: float) -> dict:
    """One continuation's summary: discounted reward sum from its first step, whether that first action
    was invalid (the row penalty of V), its length and outcome."""
    rewards = np.asarray(rewards, dtype=float)
    disc = float(np.sum(rewards * gamma ** np.arange(len(rewards))))
    return {"key": key, "disc": disc, "invalid": bool(len(valid) and not valid[0]), "steps": len(rewards),
            "won": bool(won)}


def run_continuations(plan: StartPlan, k: int, play: Callable, store: ContinuationStore, chunk: int,
                      gamma: float, progress: bool = True) -> None:
    """Sample until every start has ``k`` continuations. ``play(jobs, chunk_seed)`` plays one continuation
    per job ``(task, seed, replay, t)`` and returns a list of ``(rewards, valid, won)``; it is called
    with at most ``chunk`` jobs, each chunk's decoding seeded by how many samples the store holds."""
    todo = [j for j in range(len(plan.starts)) for _ in range(max(0, k - store.count(plan.keys[j])))]
    if not todo:
        return
    from tqdm.auto import tqdm
    bar = tqdm(total=len(todo), desc="continuations", unit="ep", disable=not progress)
    for lo in range(0, len(todo), chunk):
        part = todo[lo:lo + chunk]
        results = play([plan.job(j) for j in part], store.total())
        if len(results) != len(part):
            raise RuntimeError(f"play returned {len(results)} continuations for {len(part)} jobs")
        store.add([continuation_record(plan.keys[j], r, v, w, gamma) for j, (r, v, w) in
                   zip(part, results)])
        bar.update(len(part))
    bar.close()


@dataclass
class Truth:
    """Per-row Monte-Carlo values: Q(s_t, a_t), V(s_t), A = Q - V with its standard error (``se``, by the SE
    rule ``mc_noise.SE_RULES``), and the number of samples behind V; ``v_start``/``se_start`` hold each
    start's V and its standard error, ``row_start`` each row's start (the state it acted in: groups'
    purity); ``noise_var`` each row's unbiased sampling variance of A, no floor (``mc_noise.row_noise``: what
    a reliability needs)."""
    q: np.ndarray
    v: np.ndarray
    adv: np.ndarray
    se: np.ndarray
    n: np.ndarray
    v_se: np.ndarray              # standard error of V, per row
    win_rate: np.ndarray          # share of V's continuations that won, per row
    v_start: np.ndarray
    se_start: np.ndarray
    row_start: np.ndarray | None = None
    noise_var: np.ndarray | None = None


def next_values(plan: StartPlan, per_start: np.ndarray) -> np.ndarray:
    """Per row, a per-start value at s_{t+1}; 0 after the episode's last row."""
    return mc_noise.next_values(plan.row_next, per_start)


def row_q(plan: StartPlan, w: np.ndarray, reward, valid, gamma: float, invalid_penalty: float) -> np.ndarray:
    """Q(s_t, a_t) = r_t - c [a_t invalid] + gamma W(s_{t+1}) of every row, from per-start values W of the
    policy whose Q it is (deterministic transitions)."""
    return mc_noise.row_q(plan.row_next, w, reward, valid, gamma, invalid_penalty)


def truth_of(plan: StartPlan, samples: Samples, reward, valid, gamma: float, invalid_penalty: float,
             se: str = SE_RULE) -> Truth:
    """Q, V and A of every row from every start's continuation returns (``Samples``, two or more a start),
    with standard errors by the rule ``se`` (``mc_noise.start_se``)."""
    stats = start_stats(mc_noise.samples_for(plan, samples, invalid_penalty))
    v_se, w_se = start_se(se, stats)
    q, v, adv = row_advantage(plan, stats, reward, valid, gamma, invalid_penalty)
    s = plan.row_start
    row_se = np.sqrt(v_se[s] ** 2 + (gamma * next_values(plan, w_se)) ** 2)
    return Truth(q, v, adv, row_se, stats.count[s], v_se[s], (stats.wins / stats.count)[s], stats.v_mean,
                 v_se, s, row_noise(plan, stats, gamma))


def mc_truth(plan: StartPlan, store: ContinuationStore, reward, valid, gamma: float,
             invalid_penalty: float, se: str = SE_RULE) -> Truth:
    """Q, V and A of every row from the store's continuations (every start must have at least two), standard
    errors by the rule ``se`` (``mc_noise.start_se``: "pooled", the old "floor", or "sample")."""
    return truth_of(plan, Samples.of(plan, store, invalid_penalty), reward, valid, gamma, invalid_penalty, se)


def expert_values(plan: StartPlan, make_env: Callable, expert: Callable, reward_map: Callable, gamma: float,
                  reset_options: dict | None = None) -> np.ndarray:
    """The env's own expert's discounted (mapped) reward sum from every start, no model calls: replay to
    the state, then follow ``expert(env)``'s first action until the episode ends or the plan is empty."""
    from agents.replay import ReplayPrefix
    env = ReplayPrefix(make_env())
    out = np.zeros(len(plan.starts))
    try:
        for j in range(len(plan.starts)):
            task, seed, replay, _ = plan.job(j)
            env.reset(seed=seed, options={"task_id": task, "replay": replay, **(reset_options or {})})
            disc, k = 0.0, 0
            while True:
                plan_now = expert(env)
                if not plan_now:
                    break
                _, r, terminated, truncated, info = env.step(plan_now[0])
                disc += gamma ** k * float(reward_map(float(r), bool(terminated), info))
                k += 1
                if terminated or truncated:
                    break
            out[j] = disc
    finally:
        env.close()
    return out


def expert_advantage(plan: StartPlan, w_expert: np.ndarray, reward, valid, gamma: float,
                     invalid_penalty: float) -> np.ndarray:
    """QVal's reference view: Q^E(s_t, a_t) - V^E(s_t), the expert's value after the policy's action
    against the expert's value from the same state (deterministic, no standard error)."""
    return row_q(plan, w_expert, reward, valid, gamma, invalid_penalty) - w_expert[plan.row_start]


def finished_goal_count(plan: StartPlan, store: ContinuationStore, k: int, episode_goal: np.ndarray) -> int:
    """How many of the batch's leading goals have K continuations from every one of their states (a run
    stopped for time). Goals count in the batch's fixed order, which the outcomes did not choose."""
    done = np.ones(int(episode_goal.max()) + 1 if len(episode_goal) else 0, dtype=bool)
    for (e, _), key in zip(plan.starts, plan.keys):
        if store.count(key) < k:
            done[episode_goal[e]] = False
    return int(np.argmin(done)) if not done.all() else len(done)


def leading_goals(saved: dict, goals: list, k: int, store_path: Path, plan=None) -> tuple[dict, list]:
    """A recorded batch (``policy_play.record_batch``'s ``saved``) cut to its leading goals whose sampling
    units (``plan``: the batch's distinct states by default, or ``strata.plan_strata``'s strata) all have
    ``k`` continuations in ``store_path`` (``--finished-goals``)."""
    ro, tasks = saved["ro"], saved["tasks"]
    per_goal = len(tasks) // len(goals)
    plan = plan if plan is not None else plan_starts(episodes_of(ro, tasks, saved["seeds"]))
    n = finished_goal_count(plan, ContinuationStore(store_path), k,
                            np.arange(len(tasks)) // per_goal)
    if n < 2:
        raise ValueError(f"--finished-goals: {n} goal(s) of {len(goals)} have K={k} continuations from every "
                         "state; intervals over goals need 2 or more: run without it to play more")
    cut = select_envs(ro, np.arange(len(ro.success)) < n * per_goal)  # episodes are goal-major: a prefix
    return ({**saved, "ro": cut, "tasks": tasks[:n * per_goal], "seeds": saved["seeds"][:n * per_goal],
             "goals": saved["goals"][:n]}, goals[:n])
