"""The estimator registry and `compute_advantages`, the one entry point the trainer calls.

    adv = compute_advantages(batch, "bipace", gamma=0.95, mode="mean_norm", eps=0.05)

Every estimator is a pure function ``fn(batch, opts) -> (N,) advantages`` registered with the
StepBatch fields it needs and its own defaults. Options form one shared vocabulary (so swapping
"grpo" for "bipace" is one word): an option another estimator uses is accepted and ignored, an
option no estimator knows is an error.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace
from typing import Callable, Optional, Union

import numpy as np

from . import grouping
from .batch import StepBatch, hashable_codes, missing_field_error
from .returns import (check_mode, discounted_returns, episode_advantage, flat_groups, group_normalize,
                      penalty)


@dataclass(frozen=True)
class EstimatorOptions:
    """Options of every estimator; each estimator reads the ones it needs."""

    gamma: float = 0.95
    """Discount of the step returns R_t (GiGPO/HGPO/BiPACE scripts use 0.95; verl's yaml says 1.0)."""
    mode: Optional[str] = None
    """'mean_norm' (centre only) or 'mean_std_norm'; None = the estimator's upstream default."""
    step_weight: float = 1.0
    """omega in A = A^E + omega * A^S (GiGPO `step_advantage_w`, BiPACE w)."""
    invalid_penalty: float = 0.1
    """c: subtracted from R_i and s_i of rows with invalid format, after discounting."""
    epsilon: float = 1e-6
    """Added to the std in mean_std_norm (upstream hard-codes 1e-6)."""
    cross_steps: bool = True
    """Episode statistics over every step row (length-weighted, upstream) or one row per trajectory."""
    singleton_episode: str = "raw"
    """A one-member episode pool: 'raw' keeps the score (mu=0, sigma=1, upstream) or 'zero'."""
    equal_tol: Optional[float] = 1e-6
    """Groups whose returns span <= tol * max(1, |max|) get 0 (float32 guard, spec 10.2); None = off."""
    enable_similarity: bool = False
    """GiGPO: group anchors by difflib ratio (first-fit to a fixed representative) instead of hash."""
    similarity_thresh: float = 0.95
    """GiGPO similarity threshold, in (0, 1)."""
    history_length: int = 2
    """HGPO: levels k = 1..history_length+1 of recent-anchor history."""
    length_weight_alpha: float = 1.0
    """HGPO: level weight (k+1)^alpha."""
    base_group: bool = False
    """HGPO: add GiGPO's episode term as level 0."""
    eps: float = 0.05
    """BiGPO: join the nearest centroid iff cosine distance <= eps (0.05 for 1.5B, 0.10 for 7B)."""
    pace: str = "q_style"
    """PACE variant: 'q_style' (Q(s,a) - V(s) within a cluster) or 'diff_peer' (R - mean of other-key
    peers)."""
    pace_std_norm: bool = False
    """PACE: divide the step term by the cluster's std + epsilon (parity with mean_std_norm)."""
    # --- spec-2 (GAGPO, GraphHCA, GACA): every [ASSUMPTION] of ../shared/specs/estimators-2.md, its default
    success_threshold: float = 0.0
    """success(tau) = undiscounted episode reward > this (spec-2 0.1; sparse 10-on-win rewards)."""
    max_steps: Optional[int] = None
    """Episode cap: a trajectory of max_steps rows without success counts as truncated. Only
    `bootstrap_truncated` and `hca_truncation='drop_edge'` need it (None = no truncation known)."""
    gae_lambda: float = 0.95
    """GAGPO: GAE lambda (Schulman et al.'s usual value; 1 = Monte-Carlo, 0 = one-step TD)."""
    episode_weight: float = 0.0
    """GAGPO: w_E in A = normalised GAE + w_E * A^E (0: the GAE term already carries the outcome)."""
    value_proxy: str = "mean"
    """GAGPO: grouped value V(k) = 'mean' of the anchor group's returns or 'loo_mean' (row left out;
    a singleton falls back to its own return)."""
    value_proxy_penalised: bool = False
    """GAGPO: build V from penalised returns (exact parity with GiGPO's baseline in tests)."""
    bootstrap_truncated: bool = False
    """GAGPO: a truncated trajectory's last row bootstraps with its own group value (upstream: 0)."""
    norm_scope: str = "episode_group"
    """GAGPO: normalise the GAE advantages within 'episode_group', 'anchor_group', 'batch' or 'none'."""
    hca_weight: float = 0.5
    """GraphHCA: w in A = A^E + w * a^H (a^H = log p(next) - log p(state)); 0 gives GRPO."""
    hca_gamma: float = 0.95
    """GraphHCA: discount of the success-probability recursion p(u); must be in (0, 1)."""
    p_min: float = 1e-3
    """GraphHCA: floor of p before the log (bounds |a^H| by -log p_min)."""
    hca_combine: str = "additive"
    """GraphHCA: 'additive' A^E + w a^H or 'multiplicative' A^E * exp(w a^H)."""
    hca_truncation: str = "fail"
    """GraphHCA: a truncated trajectory's last edge goes to 'fail' or is dropped ('drop_edge')."""
    hca_history: int = 0
    """GraphHCA: node key = anchor plus the previous k anchors of the trajectory (0 = anchor only)."""
    hca_step_norm: bool = False
    """GraphHCA: standardise a^H within each episode group before weighting."""
    crit_norm: str = "zscore_sigmoid"
    """GACA: criticality from the within-trajectory NLL: 'zscore_sigmoid', 'minmax', 'mean_ratio', or
    'const0' (alpha = 0 everywhere, a test hook that gives GRPO)."""
    crit_kappa: float = 1.0
    """GACA: slope kappa of sigmoid(kappa * z)."""
    crit_cmax: float = 2.0
    """GACA: c_max of 'mean_ratio' (clip(nll / mean nll, 0, c_max) / c_max)."""
    crit_invert: bool = False
    """GACA: alpha = 1 - criticality (low-NLL steps get the step term)."""
    singleton_alpha: str = "zero"
    """GACA: alpha on rows alone in their anchor group: 'zero' (pure A^E) or 'keep'."""
    gaca_combine: str = "mixture"
    """GACA: 'mixture' (1 - alpha) A^E + alpha w A^S, or 'additive_weighted' A^E + 2 alpha w A^S."""
    exclude_invalid_from_norm: bool = True
    """GACA: format-invalid rows stay out of the NLL statistics and get alpha = 0."""
    # --- spec-3 (ECPO, ProGPO, Gated-BEPO): each [ASSUMPTION] of ../shared/specs/estimators-3.md
    ecpo_kappa: float = 2.0
    """ECPO: shrinkage kappa, mu~_{s,u} = (n_{s,u} G_{s,u} + kappa mu_s) / (n_{s,u} + kappa) (paper: 2.0)."""
    ecpo_tau: float = 4.0
    """ECPO: variance-gate count scale tau in tanh(n_s / tau) (0.46 at n = 2, 0.96 at n = 8)."""
    ecpo_gate: bool = True
    """ECPO: VarGate rho_s = tanh(n_s/tau) B_s / (B_s + W_s + epsilon); False sets rho = 1."""
    progpo_prefix: Union[str, int] = "full"
    """ProGPO: peer key = the exact history prefix ('full') or its last h (anchor, action) pairs (int h;
    0 = GiGPO's anchor group)."""
    progpo_depths: int = 2
    """ProGPO: potential levels d = 0..D of (anchor, action) history (D = the prompt's history window)."""
    progpo_semantic: str = "auto"
    """ProGPO: semantic potential level: 'embedding' (BiGPO clusters at eps), 'text' (difflib first-fit at
    progpo_sem_thresh), 'off', or 'auto' (embedding if present, else text for str anchors, else off)."""
    progpo_sem_thresh: float = 0.9
    """ProGPO: difflib threshold of the text semantic level, in (0, 1)."""
    potential_loo: bool = False
    """ProGPO: leave each row out of its own potential levels (an emptied level is dropped)."""
    progpo_transition_scope: str = "singletons"
    """ProGPO: the transition credit c fills rows alone in their prefix group ('singletons') or is added
    to every row ('all')."""
    progpo_eta: float = 1.0
    """ProGPO: weight eta of the transition credit c."""
    progpo_transition_norm: str = "match_mode"
    """ProGPO: 'match_mode' divides c by the episode group's std(R) + epsilon in mean_std_norm; 'none'."""
    bepo_gamma: float = 0.95
    """Gated-BEPO: discount of the mean-backup fixed point (1 only on acyclic group graphs)."""
    bepo_min_successors: float = 2
    """Gated-BEPO: the gate opens on nodes with >= this many distinct observed successors (inf: never)."""
    bepo_mix: str = "adaptive"
    """Gated-BEPO: beta = 1 - 1/k(node) ('adaptive') or the constant bepo_beta ('fixed')."""
    bepo_beta: float = 0.5
    """Gated-BEPO: the constant beta of bepo_mix='fixed', in [0, 1]."""
    bepo_combine: str = "convex"
    """Gated-BEPO: 'convex' (1 - g beta) A^E + g beta A~ or 'additive' A^E + g beta A~."""
    bepo_norm: str = "episode_group"
    """Gated-BEPO: normalise the GAE advantages over the episode group, over its gated rows, or 'none'."""
    bepo_history: int = 0
    """Gated-BEPO: node key = anchor plus the previous k anchors (0 = anchor only, GiGPO's key)."""
    # --- spec-2 sections 4-5 (HCAPO, RELACE): the pure-function half; the scoring pass is agents.hindsight
    ratio_unit: str = "mean"
    """HCAPO/RELACE: log-ratio l = (hind - old) / resp_len ('mean', per token) or the raw sums ('sum')."""
    ratio_clip: float = 5.0
    """HCAPO/RELACE: l is clipped to [-ratio_clip, ratio_clip] before exp."""
    hcapo_z: str = "episode"
    """HCAPO: Z of Q^H = rho Z: the undiscounted episode reward ('episode') or the step return R_t."""
    hcapo_scope: str = "group"
    """HCAPO: the adaptive threshold is the mean Q^H of the episode 'group' or of the whole 'batch'."""
    smooth: str = "kernel3"
    """HCAPO/RELACE: temporal smoothing within the trajectory: (0.25, 0.5, 0.25), renormalised at the
    ends ('kernel3'), or 'none'."""
    success_mask: bool = True
    """HCAPO/RELACE: do-no-harm mask, max(A, 0) on successful trajectories after smoothing."""
    micro_norm: str = "none"
    """HCAPO: divide the micro term by its episode group's std + epsilon ('group_std') or not ('none')."""
    relace_f_max: Optional[float] = 3.0
    """RELACE: clip the retrospective factor f to [0, f_max] (None = no clip)."""
    relace_episode_weight: float = 1.0
    """RELACE: w_E in A = w_E A^E + omega A^L (1: GiGPO's form)."""


OPTION_NAMES = tuple(f.name for f in fields(EstimatorOptions))
# string options and the values each accepts (checked once in resolve_options)
CHOICES = {
    "singleton_episode": ("raw", "zero"),
    "pace": ("q_style", "diff_peer"),
    "value_proxy": ("mean", "loo_mean"),
    "norm_scope": ("episode_group", "anchor_group", "batch", "none"),
    "hca_combine": ("additive", "multiplicative"),
    "hca_truncation": ("fail", "drop_edge"),
    "crit_norm": ("zscore_sigmoid", "minmax", "mean_ratio", "const0"),
    "singleton_alpha": ("zero", "keep"),
    "gaca_combine": ("mixture", "additive_weighted"),
    "progpo_semantic": ("auto", "embedding", "text", "off"),
    "progpo_transition_scope": ("singletons", "all"),
    "progpo_transition_norm": ("match_mode", "none"),
    "bepo_mix": ("adaptive", "fixed"),
    "bepo_combine": ("convex", "additive"),
    "bepo_norm": ("episode_group", "gated_rows", "none"),
    "ratio_unit": ("mean", "sum"),
    "hcapo_z": ("episode", "discounted"),
    "hcapo_scope": ("group", "batch"),
    "smooth": ("none", "kernel3"),
    "micro_norm": ("none", "group_std"),
}


@dataclass(frozen=True)
class Estimator:
    fn: Callable[[StepBatch, EstimatorOptions], np.ndarray]
    needs: tuple = ()
    default_mode: str = "mean_norm"
    doc: str = ""


REGISTRY: dict[str, Estimator] = {}


def register(name: str, needs: tuple = (), default_mode: str = "mean_norm"):
    def wrap(fn):
        REGISTRY[name] = Estimator(fn, needs, default_mode, (fn.__doc__ or "").strip())
        return fn
    return wrap


def available_estimators() -> list[str]:
    return sorted(REGISTRY)


def step_returns(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """Penalised discounted step returns R_i (spec §2.2 + §2.5)."""
    return discounted_returns(batch, o.gamma) - penalty(batch, o.invalid_penalty)


def episode_term(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    return episode_advantage(batch, mode=o.mode, invalid_penalty=o.invalid_penalty, epsilon=o.epsilon,
                             cross_steps=o.cross_steps, singleton_episode=o.singleton_episode,
                             equal_tol=o.equal_tol)


def step_norm_term(batch: StepBatch, o: EstimatorOptions, groups: np.ndarray) -> np.ndarray:
    return group_normalize(step_returns(batch, o), groups, mode=o.mode, epsilon=o.epsilon, ddof=1,
                           equal_tol=o.equal_tol, singleton="zero")


def pace_step_term(returns: np.ndarray, clusters: np.ndarray, keys: np.ndarray,
                   o: EstimatorOptions) -> np.ndarray:
    """PACE action-conditioned peer baselines inside each cluster (spec §6.3)."""
    ck = grouping.dense_codes(clusters, hashable_codes(keys))
    n_c, n_ck = int(clusters.max()) + 1, int(ck.max()) + 1
    c_count = np.bincount(clusters, minlength=n_c).astype(np.float64)
    c_sum = np.bincount(clusters, weights=returns, minlength=n_c)
    k_count = np.bincount(ck, minlength=n_ck).astype(np.float64)
    k_sum = np.bincount(ck, weights=returns, minlength=n_ck)
    if o.pace == "q_style":
        adv = k_sum[ck] / k_count[ck] - c_sum[clusters] / c_count[clusters]
    elif o.pace == "diff_peer":
        peers = c_count[clusters] - k_count[ck]
        peer_mean = np.divide(c_sum[clusters] - k_sum[ck], peers, out=np.zeros(len(returns)), where=peers > 0)
        adv = np.where(peers > 0, returns - peer_mean, 0.0)     # no different-action peer -> 0
    else:
        raise ValueError(f"unknown pace variant {o.pace!r}; expected 'q_style' or 'diff_peer'")
    adv = np.where(c_count[clusters] >= 2, adv, 0.0)
    if o.equal_tol is not None or o.pace_std_norm:
        mean = c_sum / c_count
        sq = np.bincount(clusters, weights=(returns - mean[clusters]) ** 2, minlength=n_c)
        std = np.sqrt(sq / np.maximum(c_count - 1, 1))
        if o.equal_tol is not None:
            adv = np.where(flat_groups(returns, clusters, n_c, o.equal_tol)[clusters], 0.0, adv)
        if o.pace_std_norm:
            adv = adv / (std[clusters] + o.epsilon)
    return adv


# estimator -> the partition its step term works within. HGPO uses level 1, its finest-grained
# partition: a row alone at level 1 is alone at every level and gets 0, like a GiGPO singleton.
STEP_PARTITIONS: dict[str, Callable[[StepBatch, EstimatorOptions], np.ndarray]] = {
    "gigpo": lambda b, o: (grouping.similarity_anchor_groups(b, o.similarity_thresh) if o.enable_similarity
                           else grouping.exact_anchor_groups(b)),
    "hgpo": lambda b, o: grouping.history_groups(b, 1),
    "pace": lambda b, o: grouping.exact_anchor_groups(b, "pace"),
    "bigpo": lambda b, o: grouping.bigpo_clusters(b, o.eps),
    "bipace": lambda b, o: grouping.bigpo_clusters(b, o.eps, "bipace"),
}


def step_groups(batch: StepBatch, estimator: str, **options) -> Optional[np.ndarray]:
    """Dense step-group code per row (never shared across rollout groups) that `estimator` compares
    returns within, or None for an estimator without a step level (GRPO)."""
    o = resolve_options(estimator, **options)
    fn = STEP_PARTITIONS.get(estimator)
    return None if fn is None else fn(batch, o)


@register("grpo", default_mode="mean_std_norm")
def grpo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """GRPO (verl-agent): episode score normalised within the rollout group, same for every step."""
    return episode_term(batch, o)


@register("gigpo", needs=("anchor",))
def gigpo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """GiGPO: A^E + w * step-normalised R within anchor groups (exact hash, or difflib similarity)."""
    groups = STEP_PARTITIONS["gigpo"](batch, o)
    return episode_term(batch, o) + o.step_weight * step_norm_term(batch, o, groups)


@register("hgpo", needs=("anchor",), default_mode="mean_std_norm")
def hgpo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """HGPO (verl-agent recipe): weighted mix of advantages over history-level groups k = 1..K."""
    if o.history_length < 0:
        raise ValueError(f"history_length must be >= 0; got {o.history_length}")
    returns = step_returns(batch, o)
    items, weights = [], []
    if o.base_group:
        items.append(episode_term(batch, o))
        weights.append(1.0)                                      # level 0: (0+1)^alpha
    for k in range(1, o.history_length + 2):
        groups = grouping.history_groups(batch, k)
        eligible = groups >= 0
        a = np.zeros(len(batch))
        if eligible.any():
            dense = np.unique(groups[eligible], return_inverse=True)[1].reshape(-1)
            a[eligible] = group_normalize(returns[eligible], dense, mode=o.mode, epsilon=o.epsilon,
                                          ddof=0, equal_tol=o.equal_tol, singleton="zero")
        items.append(a)
        weights.append(float(k + 1) ** o.length_weight_alpha)
    items = np.stack(items, axis=1)
    w = np.where(items != 0, np.asarray(weights)[None, :], 0.0)  # zero items leave the weighting
    total = w.sum(axis=1)
    return np.divide((w * items).sum(axis=1), total, out=np.zeros(len(batch)), where=total > 0)


@register("bigpo", needs=("embedding",))
def bigpo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """BiGPO: GiGPO's formula with hidden-state cosine clusters as step groups."""
    groups = STEP_PARTITIONS["bigpo"](batch, o)
    return episode_term(batch, o) + o.step_weight * step_norm_term(batch, o, groups)


@register("pace", needs=("anchor", "action_key"))
def pace(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """PACE on GiGPO's exact anchor groups: A^E + w * action-conditioned peer baseline."""
    groups = STEP_PARTITIONS["pace"](batch, o)
    step = pace_step_term(step_returns(batch, o), groups, batch.action_key, o)
    return episode_term(batch, o) + o.step_weight * step


@register("bipace", needs=("embedding", "action_key"))
def bipace(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """BiPACE: PACE inside BiGPO hidden-state clusters."""
    clusters = STEP_PARTITIONS["bipace"](batch, o)
    step = pace_step_term(step_returns(batch, o), clusters, batch.action_key, o)
    return episode_term(batch, o) + o.step_weight * step


# options whose +inf is a documented limit, not an overflow
INFINITY_MEANS = {"ecpo_kappa": "no shrunk action term, the GRPO limit",
                  "bepo_min_successors": "the gate never opens, GRPO"}


def resolve_options(name: str, **options) -> EstimatorOptions:
    if name not in REGISTRY:
        raise ValueError(f"unknown estimator {name!r}; available: {available_estimators()}")
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"unknown estimator option(s) {unknown}; known options: {list(OPTION_NAMES)}")
    for key, value in options.items():    # NaN passes every range check below and poisons the advantages
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isfinite(value):
            if not (value == math.inf and key in INFINITY_MEANS):
                allowed = f" (or inf: {INFINITY_MEANS[key]})" if key in INFINITY_MEANS else ""
                raise ValueError(f"estimator option {key} must be a finite number{allowed}; got {value!r}")
    o = replace(EstimatorOptions(), **options)
    if o.mode is None:
        o = replace(o, mode=REGISTRY[name].default_mode)
    check_mode(o.mode)
    for name_, allowed in CHOICES.items():
        if getattr(o, name_) not in allowed:
            raise ValueError(f"unknown {name_} variant {getattr(o, name_)!r}; expected one of {allowed}")
    if o.epsilon < 0:
        raise ValueError(f"epsilon must be >= 0; got {o.epsilon}")
    if o.max_steps is not None and (int(o.max_steps) != o.max_steps or o.max_steps < 1):
        raise ValueError(f"max_steps must be a positive integer or None; got {o.max_steps!r}")
    return o


def compute_advantages(batch: StepBatch, estimator: str, **options) -> np.ndarray:
    """Step advantages (N,) in the batch's row order. See `EstimatorOptions` for every option."""
    if not isinstance(batch, StepBatch):
        raise ValueError(f"compute_advantages takes a StepBatch; got {type(batch).__name__}")
    o = resolve_options(estimator, **options)
    spec = REGISTRY[estimator]
    for need in spec.needs:
        if getattr(batch, need) is None:
            raise missing_field_error(estimator, need)
    if len(batch) == 0:
        return np.zeros(0)
    return spec.fn(batch, o)
