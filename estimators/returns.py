"""Reward plumbing shared by every estimator (spec §2): step returns, episode scores, the penalty,
and the vectorised group statistics the normalisations are built from."""
from __future__ import annotations

import numpy as np

from .batch import StepBatch

MODES = ("mean_norm", "mean_std_norm")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES} "
                         "('mean_std_norm' divides by the group std, 'mean_norm' only centres)")


def discounted_returns(batch: StepBatch, gamma: float) -> np.ndarray:
    """R_t = sum_k gamma^k r_{t+k} over each trajectory's rows in step order (no bootstrap:
    a truncated episode is simply cut, as upstream)."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1]; got {gamma}")
    return backward_discount(batch, batch.reward, gamma)


def backward_discount(batch: StepBatch, values: np.ndarray, factor: float) -> np.ndarray:
    """x_t = v_t + factor * x_{t+1} within each trajectory, in step order, x after the last row = 0
    (returns with factor gamma, GAE with factor gamma * lambda)."""
    view = batch.view
    if len(batch) == 0:
        return np.zeros(0)
    # Trajectory x position matrix, filled backwards one column at a time (<= max length iterations,
    # each vectorised over all trajectories).
    length = np.bincount(view.traj, minlength=view.n_trajs)
    grid = np.zeros((view.n_trajs, int(length.max()) + 1))
    grid[view.traj, view.pos] = values
    running = np.zeros(view.n_trajs)
    for col in range(grid.shape[1] - 2, -1, -1):
        running = grid[:, col] + factor * running
        grid[:, col] = running
    return grid[view.traj, view.pos]


def next_row(batch: StepBatch) -> np.ndarray:
    """(N,) index of the row that follows each row in its trajectory (step order), -1 for the last."""
    view = batch.view
    order = view.order
    out = np.full(len(batch), -1, dtype=np.int64)
    same = view.traj[order[1:]] == view.traj[order[:-1]]
    out[order[:-1][same]] = order[1:][same]
    return out


def trajectory_outcome(batch: StepBatch, success_threshold: float,
                       max_steps: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Per row: success of its trajectory (undiscounted episode reward > threshold) and truncation
    (max_steps rows without success; never, when max_steps is None), spec-2 0.1."""
    view = batch.view
    episode = np.bincount(view.traj, weights=batch.reward, minlength=view.n_trajs)
    success = episode > success_threshold
    length = np.bincount(view.traj, minlength=view.n_trajs)
    truncated = ~success & (length == max_steps) if max_steps is not None else np.zeros_like(success)
    return success[view.traj], truncated[view.traj]


def penalty(batch: StepBatch, invalid_penalty: float) -> np.ndarray:
    """c * (1 - valid_i): subtracted after discounting, from R_i and s_i of that row only."""
    if invalid_penalty < 0 or not np.isfinite(invalid_penalty):
        raise ValueError(f"invalid_penalty must be a finite number >= 0; got {invalid_penalty}")
    return invalid_penalty * (~batch.action_valid)


def episode_scores(batch: StepBatch, invalid_penalty: float) -> np.ndarray:
    """s_i = undiscounted episode reward of the row's trajectory minus the row's penalty."""
    view = batch.view
    episode = np.bincount(view.traj, weights=batch.reward, minlength=view.n_trajs)
    return episode[view.traj] - penalty(batch, invalid_penalty)


def flat_groups(values: np.ndarray, groups: np.ndarray, n_groups: int, tol: float) -> np.ndarray:
    """(n_groups,) True where a group's values span <= tol * max(1, |max|): equal up to float noise."""
    hi = np.full(n_groups, -np.inf)
    lo = np.full(n_groups, np.inf)
    np.maximum.at(hi, groups, values)
    np.minimum.at(lo, groups, values)
    return hi - lo <= tol * np.maximum(1.0, np.abs(hi))


def group_std(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per row: the ddof-1 std of `values` over the row's group (dense codes; 0 for a one-row group)."""
    n = np.bincount(groups).astype(np.float64)
    mean = np.bincount(groups, weights=values) / np.maximum(n, 1)
    sq = np.bincount(groups, weights=(values - mean[groups]) ** 2)
    return np.sqrt(sq / np.maximum(n - 1, 1))[groups]


def group_normalize(values: np.ndarray, groups: np.ndarray, *, mode: str, epsilon: float, ddof: int,
                    equal_tol: float | None, pool: np.ndarray | None = None,
                    singleton: str = "zero") -> np.ndarray:
    """(v - mean_g) [/ (std_g + epsilon)] per group of `groups` (dense int codes).

    pool: bool mask of rows that enter the statistics (default all); every row is normalised with
    its group's statistics. singleton: what a group whose pool has one member gives:
    "zero" (GiGPO step level: mean = own value) or "raw" (GRPO/GiGPO episode level: mu=0, sigma=1,
    so mean_std_norm gives v / (1 + epsilon)).
    equal_tol: groups whose pooled values span <= equal_tol * max(1, |max|) give 0 (spec §10.2).
    """
    check_mode(mode)
    if len(values) == 0:
        return np.zeros(0)
    n_groups = int(groups.max()) + 1
    pool = np.ones(len(values), dtype=bool) if pool is None else pool
    g, v = groups[pool], values[pool]
    count = np.bincount(g, minlength=n_groups).astype(np.float64)
    mean = np.bincount(g, weights=v, minlength=n_groups) / np.maximum(count, 1)
    sq = np.bincount(g, weights=(v - mean[g]) ** 2, minlength=n_groups)
    std = np.sqrt(sq / np.maximum(count - ddof, 1))
    centred = values - mean[groups]
    adv = centred / (std[groups] + epsilon) if mode == "mean_std_norm" else centred
    if equal_tol is not None:
        flat = (count >= 2) & flat_groups(v, g, n_groups, equal_tol)
        adv = np.where(flat[groups], 0.0, adv)
    single = (count == 1)[groups]
    if singleton == "raw":
        # upstream sets mu=0, sigma=1 for a one-member pool, so the score passes through
        raw = values / (1.0 + epsilon) if mode == "mean_std_norm" else values
        adv = np.where(single, raw, adv)
    elif singleton == "zero":
        adv = np.where(single, 0.0, adv)
    else:
        raise ValueError(f"singleton must be 'raw' or 'zero'; got {singleton!r}")
    return adv


def episode_advantage(batch: StepBatch, *, mode: str, invalid_penalty: float, epsilon: float,
                      cross_steps: bool, singleton_episode: str, equal_tol: float | None) -> np.ndarray:
    """GRPO / GiGPO episode term A^E (verl-agent `episode_norm_reward`).

    cross_steps=True pools every step row of the group, so each trajectory is weighted by its
    length (upstream default); False pools one row per trajectory (its first step).
    """
    view = batch.view
    scores = episode_scores(batch, invalid_penalty)
    pool = None
    if not cross_steps:
        pool = view.pos == 0
    return group_normalize(scores, view.group, mode=mode, epsilon=epsilon, ddof=1,
                           equal_tol=equal_tol, pool=pool, singleton=singleton_episode)


def next_state_values(batch, values: np.ndarray, o) -> np.ndarray:
    """Each row's value of the state after it: the next row's value, 0 after a trajectory's last row, or,
    with ``o.bootstrap_truncated``, the last row's own value where the episode was cut at ``o.max_steps``."""
    nxt = next_row(batch)
    last = nxt < 0
    v_next = np.where(last, 0.0, values[np.maximum(nxt, 0)])
    if o.bootstrap_truncated:
        _, truncated = trajectory_outcome(batch, o.success_threshold, o.max_steps)
        v_next = np.where(last & truncated, values, v_next)
    return v_next
