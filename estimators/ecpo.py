"""ECPO (arXiv 2606.05885): evidence-calibrated action advantages with a variance gate (spec-3 section 1).

Built from third-party notes quoting the paper (no method section or code was read); every formula the
notes do not give is an [ASSUMPTION] of the spec and an option of `EstimatorOptions` with its default.

    s = exact anchor group, u = canonical action (action_key), R = GiGPO's penalised step return
    mu~_{s,u} - mu_s = n_{s,u} / (n_{s,u} + kappa) * (G_{s,u} - mu_s)   shrinkage (ecpo_kappa)
    A_act = (mu~_{s,u} - mu_s) [/ (sigma_s + epsilon) in mean_std_norm]; 0 on singleton or flat groups
    rho_s = tanh(n_s / tau) * B_s / (B_s + W_s + epsilon)                   between/within-action variance
    A     = A^E + omega * rho_s * A_act                                     (ecpo_tau, ecpo_gate, step_weight)
"""
from __future__ import annotations

import numpy as np

from . import grouping
from .batch import StepBatch
from .gae import _anchor_groups
from .registry import STEP_PARTITIONS, EstimatorOptions, episode_term, register, step_returns
from .returns import flat_groups

STEP_PARTITIONS["ecpo"] = lambda b, o: _anchor_groups(b, o, "ecpo")


def _check(o: EstimatorOptions) -> None:
    if not o.ecpo_kappa >= 0:          # also rejects NaN; inf is allowed (the GRPO limit)
        raise ValueError(f"ecpo_kappa must be >= 0; got {o.ecpo_kappa}")
    if not o.ecpo_tau > 0:
        raise ValueError(f"ecpo_tau must be > 0; got {o.ecpo_tau}")


def action_statistics(batch: StepBatch, o: EstimatorOptions):
    """Per row: anchor group s, (s, u) code, R, and the per-row n_s, mu_s, sigma_s, n_{s,u}, G_{s,u}."""
    if batch.action_key is None:
        from .batch import missing_field_error
        raise missing_field_error("ecpo", "action_key")
    s = STEP_PARTITIONS["ecpo"](batch, o)
    su = grouping.dense_codes(s, batch.field_codes("action_key"))
    R = step_returns(batch, o)
    n_s = np.bincount(s).astype(np.float64)
    mu_s = np.bincount(s, weights=R) / n_s
    sq = np.bincount(s, weights=(R - mu_s[s]) ** 2)
    sigma_s = np.sqrt(sq / np.maximum(n_s - 1, 1))
    n_su = np.bincount(su).astype(np.float64)
    g_su = np.bincount(su, weights=R) / n_su
    return s, su, R, n_s[s], mu_s[s], sigma_s[s], n_su[su], g_su[su]


def action_advantage(batch: StepBatch, o: EstimatorOptions) -> tuple[np.ndarray, np.ndarray]:
    """(A_act, rho) per row (spec-3 1.3 steps 3-6)."""
    _check(o)
    s, su, R, n_s, mu_s, sigma_s, n_su, g_su = action_statistics(batch, o)
    gap = g_su - mu_s
    shrink = n_su / (n_su + o.ecpo_kappa) if np.isfinite(o.ecpo_kappa) else np.zeros_like(n_su)
    act = shrink * gap
    if o.mode == "mean_std_norm":
        act = act / (sigma_s + o.epsilon)
    live = n_s >= 2
    if o.equal_tol is not None:
        live &= ~flat_groups(R, s, int(s.max()) + 1, o.equal_tol)[s]
    act = np.where(live, act, 0.0)
    if not o.ecpo_gate:
        return act, np.ones(len(batch))
    # one-way ANOVA split of the anchor's population variance: between actions B, within actions W
    n_groups = int(s.max()) + 1
    between = np.bincount(s, weights=gap ** 2, minlength=n_groups)[s] / n_s
    within = np.bincount(s, weights=(R - g_su) ** 2, minlength=n_groups)[s] / n_s
    rho = np.tanh(n_s / o.ecpo_tau) * between / (between + within + o.epsilon)
    return act, np.where(live, rho, 0.0)


def divergent_anchor_share(batch: StepBatch, **options) -> float:
    """Diagnostic (spec-3 1.3 step 8, a proxy): share of anchor groups with >= 2 rows whose best action
    (highest G_{s,u}) was seen once. No effect on the advantage."""
    from .registry import resolve_options
    o = resolve_options("ecpo", **options)
    s, su, R, n_s, _, _, n_su, g_su = action_statistics(batch, o)
    order = np.lexsort((-g_su, s))                       # per group, the best action's rows first
    first = np.ones(len(order), dtype=bool)
    first[1:] = s[order][1:] != s[order][:-1]
    best = order[first]
    shared = n_s[best] >= 2
    return float(np.mean(n_su[best][shared] == 1)) if shared.any() else 0.0


@register("ecpo", needs=("anchor", "action_key"))
def ecpo(batch: StepBatch, o: EstimatorOptions) -> np.ndarray:
    """ECPO: A^E + omega * rho_s * shrunk action advantage (spec-3 section 1). kappa = 0 with the gate off
    is PACE q_style on anchor groups (GiGPO when every action of a group is distinct); omega = 0 is GRPO."""
    act, rho = action_advantage(batch, o)
    return episode_term(batch, o) + o.step_weight * rho * act
