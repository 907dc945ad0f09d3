"""Shared plot helpers of the benchmark reports (``benchmarks.learning.compare``,
``benchmarks.learning.table_report``).

    from benchmarks.plotting import MARKERS, STYLES, data_limits
    ax.set_ylim(*data_limits(ax, 100.0))
"""
from __future__ import annotations

import numpy as np

# distinct dashes and markers keep overlapping curves (e.g. all at 0%) distinguishable
STYLES, MARKERS = ["-", "--", "-.", ":"], ["o", "s", "^", "D", "v", "P"]


def data_limits(ax, top: float) -> tuple[float, float]:
    """y range around what the panel shows (curves and bands), with a margin, inside [0, top]."""
    ys = [y for line in ax.lines for y in np.asarray(line.get_ydata(), float)]
    ys += [y for coll in ax.collections for path in coll.get_paths() for y in path.vertices[:, 1]]
    ys = np.asarray(ys, float)
    ys = ys[np.isfinite(ys)]
    if not len(ys):
        return 0.0, top
    lo, hi = float(ys.min()), float(ys.max())
    pad = max(0.08 * (hi - lo), 0.02 * top)
    return max(lo - pad, -0.02 * top), min(hi + pad, 1.02 * top)
