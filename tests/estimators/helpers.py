"""Small builders for estimator tests."""
from __future__ import annotations

import numpy as np

from estimators import StepBatch


def make_batch(trajs, *, embed=None, keys=None, invalid=(), nll=None, resp_len=None, hind_nll=None):
    """trajs: list of (group, [(anchor, reward), ...]) -> StepBatch, rows in (traj, step) order.

    embed: optional callable anchor -> vector; keys: optional list of per-row keys; invalid: row
    indices whose action is invalid; nll / resp_len: per-row mean NLL and response length (GACA;
    default: NLL 1 and 2 tokens for every row); hind_nll: per-row mean NLL under the hindsight prompt
    (HCAPO/RELACE; default: the same as nll, NaN = not scored)."""
    g, t, s, r, a = [], [], [], [], []
    for traj_id, (group, steps) in enumerate(trajs):
        for step, (anchor, reward) in enumerate(steps):
            g.append(group), t.append(traj_id), s.append(step), r.append(reward), a.append(anchor)
    valid = np.ones(len(g), dtype=bool)
    valid[list(invalid)] = False
    emb = np.stack([embed(x) for x in a]).astype(np.float32) if embed else None
    key = np.array(keys if keys is not None else a, dtype=object)
    length = np.full(len(g), 2) if resp_len is None else np.asarray(resp_len)
    mean_nll = np.ones(len(g)) if nll is None else np.asarray(nll, dtype=float)
    return StepBatch(np.array(g), np.array(t), np.array(s), np.array(r, dtype=float), valid,
                     anchor=np.array(a, dtype=object), action_key=key, embedding=emb,
                     resp_len=length, old_logp_sum=-mean_nll * length,
                     hind_logp_sum=-(mean_nll if hind_nll is None else np.asarray(hind_nll, float)) * length)


def one_hot_embedder(vocabulary):
    """The identity embedder of spec §6.2: an orthonormal code per anchor."""
    index = {v: i for i, v in enumerate(sorted(set(vocabulary)))}

    def embed(anchor):
        e = np.zeros(len(index), dtype=np.float32)
        e[index[anchor]] = 1.0
        return e
    return embed


def permuted(batch: StepBatch, perm: np.ndarray) -> StepBatch:
    opt = {k: None if getattr(batch, k) is None else getattr(batch, k)[perm]
           for k in ("anchor", "action_key", "embedding", "resp_len", "old_logp_sum", "hind_logp_sum")}
    return StepBatch(batch.group_id[perm], batch.traj_id[perm], batch.step_idx[perm], batch.reward[perm],
                     batch.action_valid[perm], **opt)


def random_batch(rng, groups=3, rollouts=4, max_len=6, anchors=4, dim=8, keys=3, p_invalid=0.2,
                 reward_scale=10.0):
    """Random sparse-reward batch with repeated anchors, hidden states near anchor prototypes."""
    protos = rng.standard_normal((groups, anchors, dim))
    g, t, s, r, v, a, k, e = [], [], [], [], [], [], [], []
    for group in range(groups):
        for roll in range(rollouts):
            length = int(rng.integers(1, max_len + 1))
            won = rng.random() < 0.5
            for step in range(length):
                anchor = int(rng.integers(anchors))
                g.append(group), t.append(roll), s.append(step)
                r.append(reward_scale if (won and step == length - 1) else 0.0)
                v.append(rng.random() > p_invalid)
                a.append(f"obs {anchor}")
                k.append(f"act {int(rng.integers(keys))}")
                e.append(protos[group, anchor] + 1e-3 * rng.standard_normal(dim))
    n = len(g)
    length = rng.integers(0, 6, n)               # some empty responses
    old = -rng.gamma(2.0, 0.5, n) * length
    return StepBatch(np.array(g), np.array(t), np.array(s), np.array(r), np.array(v),
                     anchor=np.array(a, dtype=object), action_key=np.array(k, dtype=object),
                     embedding=np.array(e, dtype=np.float32), resp_len=length,
                     old_logp_sum=old, hind_logp_sum=old + rng.normal(0.0, 1.0, n) * length)
