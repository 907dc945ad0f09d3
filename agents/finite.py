"""Finite numbers or a stop: the checks between an estimator, an optimizer step and a saved adapter.

A NaN anywhere in training spreads to every LoRA weight within one step and then only shows as a crash
deep in a later rollout, or not at all; these checks stop the run where the value first appears, with an
error that says where, before anything non-finite is stepped into the weights or written to disk.
"""
from __future__ import annotations

import numpy as np
import torch


class NonFiniteError(ValueError):
    """A NaN or infinity where training needs a number; the run stops and keeps its last checkpoint."""


def check_advantages(adv: np.ndarray, batch, estimator: str, options: dict, show: int = 5) -> None:
    """Every advantage finite, else an error naming the estimator, its options and the first bad rows."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(adv, dtype=np.float64)))
    if not len(bad):
        return
    rows = "; ".join(f"row {r} (group {batch.group_id[r]}, trajectory {batch.traj_id[r]}, step "
                     f"{batch.step_idx[r]}, reward {batch.reward[r]}): {adv[r]}" for r in bad[:show])
    raise NonFiniteError(f"estimator {estimator!r} with options {options} gave {len(bad)} non-finite "
                         f"advantage(s) of {len(adv)}; first: {rows}. The run stops before the update; its "
                         "last checkpoint is kept")


def check_step(loss: float, grad_norm: float, where: str) -> None:
    """A finite loss and gradient norm before an optimizer step, else an error (the step is not taken)."""
    if np.isfinite(loss) and np.isfinite(grad_norm):
        return
    raise NonFiniteError(f"non-finite loss {loss} or gradient norm {grad_norm} at {where}: the optimizer "
                         "step was not taken and the run stops; its last checkpoint is kept. A smaller lr "
                         "or grad_clip, or the advantages (train.csv adv_mean, adv_std), may say why")


def check_weights(model, what: str) -> None:
    """Every trainable weight finite before ``what`` is saved, else an error (nothing is written)."""
    bad = [n for n, p in model.named_parameters() if p.requires_grad and not torch.isfinite(p).all()]
    if bad:
        raise NonFiniteError(f"{len(bad)} trainable weight tensor(s) hold NaN or inf (first: {bad[0]}); "
                             f"{what} was not saved")
