"""Step groups: GiGPO anchor groups (exact and similarity), HGPO history levels, BiGPO clusters.

Each function returns dense int group codes (N,) that never cross rollout groups; the estimators
then normalise returns inside those codes.
"""
from __future__ import annotations

import difflib

import numpy as np

from .batch import StepBatch, missing_field_error


def _require(batch: StepBatch, field: str, estimator: str) -> np.ndarray:
    value = getattr(batch, field)
    if value is None:
        raise missing_field_error(estimator, field)
    return value


def dense_codes(*columns: np.ndarray) -> np.ndarray:
    """Dense int codes of the distinct rows of the stacked int columns, numbered in lexicographic order.

    The columns are packed into one mixed-radix int64 key when their ranges fit (a 1-D unique is several
    times faster than ``np.unique(axis=0)``, and gives the same codes); otherwise the 2-D unique."""
    cols = [np.asarray(c, dtype=np.int64) for c in columns]
    if len(cols[0]) == 0:
        return np.zeros(0, dtype=np.int64)
    key, span = np.zeros(len(cols[0]), dtype=np.int64), 1
    for c in cols:
        lo, width = int(c.min()), int(c.max()) - int(c.min()) + 1
        span *= width
        if span >= 2 ** 62:
            _, inverse = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
            return inverse.reshape(-1).astype(np.int64)
        key = key * width + (c - lo)
    if span <= 4 * len(key):
        # a key range of a few times the row count (anchor groups, trajectory positions): mark the keys
        # present and number them by a running count, the same codes as np.unique without its sort (3x
        # faster at the range of the rows; slower beyond ~4x, where the cumsum outgrows the sort)
        present = np.zeros(span, dtype=np.int64)
        present[key] = 1
        return np.cumsum(present)[key] - 1
    _, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def exact_anchor_groups(batch: StepBatch, estimator: str = "gigpo") -> np.ndarray:
    """GiGPO exact mode: key (group_id, anchor); time and trajectory are ignored, so a trajectory
    revisiting a state joins its own earlier step."""
    _require(batch, "anchor", estimator)
    return dense_codes(batch.view.group, batch.field_codes("anchor"))


def similarity_anchor_groups(batch: StepBatch, similarity_thresh: float,
                             estimator: str = "gigpo") -> np.ndarray:
    """GiGPO similarity mode: per group, first-fit to a cluster's first member (never updated) with
    difflib ratio >= thresh. Upstream visits rows in batch order; we use the canonical order so the
    result does not depend on row permutation."""
    if not 0.0 < similarity_thresh < 1.0:
        raise ValueError(f"similarity_thresh must be in (0, 1) when enable_similarity=True; "
                         f"got {similarity_thresh}")
    anchor = _require(batch, "anchor", estimator)
    view = batch.view
    labels = np.empty(len(batch), dtype=np.int64)
    next_label = 0
    reps: list[str] = []
    rep_labels: list[int] = []
    memo: dict[str, int] = {}
    current_group = -1
    for row in view.order:
        text = anchor[row]
        if not isinstance(text, str):
            raise ValueError(f"similarity mode compares text; StepBatch.anchor[{row}] is "
                             f"{type(text).__name__}. Use exact mode for non-text anchors")
        if view.group[row] != current_group:
            current_group, reps, rep_labels, memo = view.group[row], [], [], {}
        label = memo.get(text)
        if label is None:
            matcher = difflib.SequenceMatcher(None, text)
            for rep, rep_label in zip(reps, rep_labels):
                # a first-fit match against the fixed representative, as upstream
                matcher.set_seq2(rep)
                # the quick ratios are upper bounds of ratio(): same groups, far fewer full diffs
                if matcher.real_quick_ratio() >= similarity_thresh and \
                        matcher.quick_ratio() >= similarity_thresh and matcher.ratio() >= similarity_thresh:
                    label = rep_label
                    break
            if label is None:
                label = next_label
                next_label += 1
                reps.append(text)
                rep_labels.append(label)
            memo[text] = label
        labels[row] = label
    return labels


def history_groups(batch: StepBatch, level: int, estimator: str = "hgpo") -> np.ndarray:
    """HGPO level-k key (group, o_{t-k+1..t}) for rows with t >= k-1; other rows get -1."""
    _require(batch, "anchor", estimator)
    view = batch.view
    codes = batch.field_codes("anchor")
    length = np.bincount(view.traj, minlength=view.n_trajs)
    grid = np.full((view.n_trajs, int(length.max())), -1, dtype=np.int64)
    grid[view.traj, view.pos] = codes
    eligible = view.pos >= level - 1
    out = np.full(len(batch), -1, dtype=np.int64)
    if eligible.any():
        rows = np.flatnonzero(eligible)
        cols = [view.group[rows]]
        for back in range(level - 1, -1, -1):
            cols.append(grid[view.traj[rows], view.pos[rows] - back])
        out[rows] = dense_codes(*cols)
    return out


def bigpo_clusters(batch: StepBatch, eps: float, estimator: str = "bigpo", block: int = 12) -> np.ndarray:
    """BiGPO greedy single-pass clustering by cosine distance, per rollout group.

    Rows are visited in canonical order; each joins the nearest running-mean centroid (re-normalised;
    ties -> earliest cluster) iff 1 - cos <= eps, else starts a cluster. Zero embeddings stay zero
    (cosine 0 to everything). All groups advance together, one canonical position at a time, and
    positions are processed in blocks: dot products against the centroids at the block start come
    from one batched matmul, and the changes made inside the block are added from the block's own
    Gram matrix, so the Python loop runs max-group-size times, never per pair. Blocks of ~12 rows keep
    the working set in cache (at 24+ the batched matmuls got 1.7x slower here).
    """
    if not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps (BiGPO cosine-distance threshold) must be a finite number >= 0; got {eps}")
    import torch  # lazy: only the scatter-add below needs it, `import estimators` stays numpy-only

    emb = _require(batch, "embedding", estimator)
    view = batch.view
    n = len(batch)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    sizes = np.bincount(view.group, minlength=view.n_groups)
    n_groups, n_max = view.n_groups, int(sizes.max())
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.arange(n) - np.repeat(starts, sizes)               # position inside the group
    index = np.zeros((n_groups, n_max), dtype=np.int64)          # canonical row at (group, position)
    active = np.zeros((n_groups, n_max), dtype=bool)
    index[view.group[view.order], rank] = view.order
    active[view.group[view.order], rank] = True
    sq = np.einsum("ij,ij->i", emb, emb).astype(np.float64)
    inv = np.where(sq > 0, 1.0 / np.sqrt(np.where(sq > 0, sq, 1.0)), 0.0)
    unit_sq = (sq > 0).astype(np.float64)                        # |u|^2 of the unit vector (0 for zero rows)
    all_groups = np.arange(n_groups)

    d = emb.shape[1]
    cap = n_max + 1                                               # a group never has more clusters than rows
    # sum of member unit vectors, grown on demand
    sums = np.zeros((n_groups, min(cap, 64), d), dtype=np.float32)
    norm_sq = np.zeros((n_groups, cap))                           # |sum|^2, kept in float64
    inv_norm = np.zeros((n_groups, cap))                          # 1/|sum| (0 for a zero or unused sum)
    # An unused cluster id scores cosine 0, which can only win argmax when no existing centroid is
    # joinable for eps < 1; for eps >= 1 unused ids must be masked out explicitly.
    closed = np.full((n_groups, cap), -np.inf) if eps >= 1 else None
    count = np.zeros(n_groups, dtype=np.int64)
    label = np.full((n_groups, n_max), -1, dtype=np.int64)
    for t0 in range(0, n_max, block):
        t1 = min(t0 + block, n_max)
        b = t1 - t0
        rows, act = index[:, t0:t1], active[:, t0:t1]
        x = emb[rows]                                             # (G, b, d)
        w = np.where(act, inv[rows], 0.0)                         # unit scaling, 0 on padding
        k0 = int(count.max())                                     # clusters that exist at block start
        kk = k0 + b                                               # every cluster id this block can touch
        # one matmul gives dots to the block-start centroids and the block's own Gram matrix
        both = np.matmul(x, np.concatenate([sums[:, :k0], x], axis=1).transpose(0, 2, 1)) * w[:, :, None]
        dots = np.zeros((n_groups, b, kk))
        dots[:, :, :k0] = both[:, :, :k0]
        gram = both[:, :, k0:] * w[:, None, :]
        live_all = act.all(axis=0)
        for p in range(b):
            g = all_groups if live_all[p] else np.flatnonzero(act[:, p])
            if not len(g):
                continue
            dp = dots[g, p, :]
            score = dp * inv_norm[g, :kk]                         # cosine to each centroid
            if closed is not None:
                score += closed[g, :kk]
            best = score.argmax(axis=1)                           # first maximum = earliest cluster
            here = np.arange(len(g))
            join = 1.0 - score[here, best] <= eps
            tg = np.where(join, best, count[g])
            nsq = norm_sq[g, tg] + 2.0 * dp[here, tg] + unit_sq[rows[g, p]]
            norm_sq[g, tg] = nsq
            inv_norm[g, tg] = np.divide(1.0, np.sqrt(nsq), out=np.zeros_like(nsq), where=nsq > 0)
            if closed is not None:
                closed[g, tg] = 0.0
            dots[g, :, tg] += gram[g, :, p]
            label[g, t0 + p] = tg
            count[g] += ~join
        k1 = int(count.max())
        if sums.shape[1] < k1:
            grown = np.zeros((n_groups, min(cap, max(2 * sums.shape[1], k1)), d), dtype=np.float32)
            grown[:, :sums.shape[1]] = sums
            sums = grown
        # scatter-add the block's unit vectors into their clusters (torch's index_add_ is the one
        # fast unbuffered scatter-add at hand; numpy's add.at / reduceat are 20x slower here)
        gi, pi = np.nonzero(act)
        slot = torch.from_numpy(gi * sums.shape[1] + label[gi, t0 + pi])
        vals = torch.from_numpy(x[gi, pi] * w[gi, pi, None].astype(np.float32))
        torch.from_numpy(sums).view(-1, d).index_add_(0, slot, vals)
    offsets = np.concatenate([[0], np.cumsum(count)[:-1]])
    out = np.empty(n, dtype=np.int64)
    gi, ti = np.nonzero(active)
    out[index[gi, ti]] = offsets[gi] + label[gi, ti]
    return out
