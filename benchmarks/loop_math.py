"""Arithmetic of the plain per-row estimator loops (``benchmarks.estimator_speed``,
``benchmarks.estimator_loops``): the reference the vectorised library is timed and tested against.

    from benchmarks.loop_math import norm
    norm(1.0, [0.0, 1.0], "mean_norm", eps=1e-6, ddof=0, tol=1e-6, singleton="raw")   # 0.5
"""
from __future__ import annotations

import math

import numpy as np


def key(v):
    if isinstance(v, np.ndarray):
        return tuple(v.ravel().tolist())
    return v


def mean(xs):
    return sum(xs) / len(xs)


def std(xs, ddof):
    m = mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / max(len(xs) - ddof, 1))


def flat(xs, tol):
    return tol is not None and len(xs) >= 2 and max(xs) - min(xs) <= tol * max(1.0, abs(max(xs)))


def norm(value, pool, mode, eps, ddof, tol, singleton):
    if len(pool) == 1:
        if singleton == "raw":
            return value / (1 + eps) if mode == "mean_std_norm" else value
        return 0.0
    if flat(pool, tol):
        return 0.0
    m = mean(pool)
    return (value - m) / (std(pool, ddof) + eps) if mode == "mean_std_norm" else value - m
