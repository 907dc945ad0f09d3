"""The hidden-state study's honest choices (``hidden_sweep.py``): each cell's goals split in two halves fixed
by a seed, the sweep point that scores best on half A scored on half B, and the named BiGPO settings
(agents/bigpo_settings.py: the paper's, the anchor-calibrated one), chosen in advance, on both halves.

    selection = select_and_score(cell, sweep_rows, seed)      # what hidden_sweep writes as selection.json
"""
from __future__ import annotations

import numpy as np

from benchmarks.credit.advantage_metrics import corr
from benchmarks.credit.hidden_cells import (DRAWS, Cell, advantages, clusters, n_clusters, random_partitions,
                                            score_point)


def split_goals(cell: Cell, seed: int) -> tuple[list, list]:
    """The goals (indices into ``cell.members``) of half A and half B, fixed by ``seed``."""
    order = np.random.default_rng(seed).permutation(len(cell.members))
    half = len(order) // 2
    return sorted(order[:half].tolist()), sorted(order[half:].tolist())


CRITERIA = {
    # name: (formula, what is maximised on half A)
    "bigpo": ("gigpo", "r"), "bipace": ("pace", "r"),
    # what geometry adds: the score minus that of size-matched random partitions of the same point
    "bigpo_geometry": ("gigpo", "r - random"), "bipace_geometry": ("pace", "r - random"),
}


def select_and_score(cell: Cell, rows: list[dict], seed: int) -> dict:
    """Per criterion of ``CRITERIA``: the sweep point that maximises it on half A of the goals, and its
    paired differences on half B; the paper's setting, chosen in advance, on half B and on all goals."""
    a, b = split_goals(cell, seed)
    on_b = [cell.members[g] for g in b]
    idx_a = np.concatenate([cell.members[g] for g in a])
    out = {"seed": seed, "goals_a": [str(cell.goal[cell.members[g][0]]) for g in a],
           "goals_b": [str(cell.goal[cell.members[g][0]]) for g in b], "chosen": {}}
    on_a = []                       # per sweep row: {criterion: value on half A}
    for row in rows:
        codes = clusters(cell, row["block"] - 1, row["pooling"], row["centring"], row["eps"])
        rng = np.random.default_rng([seed, 4, row["block"], int(row["eps"] * 1e9)])
        draws = [random_partitions(cell, codes, rng) for _ in range(DRAWS)]
        value = {}
        for formula in ("gigpo", "pace"):
            r = corr(advantages(cell, codes, formula)[idx_a], cell.adv[idx_a])
            rand = np.mean([corr(advantages(cell, d, formula)[idx_a], cell.adv[idx_a]) for d in draws])
            value[(formula, "r")], value[(formula, "r - random")] = r, r - rand
        on_a.append(value)
    for name, key in CRITERIA.items():
        k = int(np.argmax([v[key] for v in on_a]))       # ties: the first (finest layer, lowest radius)
        best = rows[k]
        codes = clusters(cell, best["block"] - 1, best["pooling"], best["centring"], best["eps"])
        out["chosen"][name] = {
            "setting": {f: best[f] for f in ("block", "depth", "pooling", "centring", "eps", "clusters")},
            "criterion": key[1], "value_on_a": on_a[k][key],
            "on_b": score_point(cell, codes, on_b, np.random.default_rng([seed, 1]))}
    out["named"] = named_settings(cell, [cell.members[g] for g in a], on_b, seed)
    out["paper"] = out["named"]["paper"]
    out["named_choice"] = named_choice(cell, out["named"], on_b)
    return out


def named_choice(cell: Cell, named: dict, on_b: list) -> dict:
    """For bigpo and bipace: the named setting with the best Pearson r on half A (a preset's default is
    chosen so), and its paired difference in r against every other named setting on half B."""
    from benchmarks.credit.hidden_cells import difference
    usable = {n: p for n, p in named.items() if "setting" in p}
    out = {}
    for est, formula in (("bigpo", "gigpo"), ("bipace", "pace")):
        best = max(usable, key=lambda n: usable[n]["on_a"][f"r_{est}"])
        advs = {n: advantages(cell, clusters(cell, p["setting"]["block"] - 1, "last", "raw",
                                             p["setting"]["eps"]), formula) for n, p in usable.items()}
        out[est] = {"chosen": best, "versus": {}}
        for other in usable:
            if other != best:
                d, lo, hi = difference(advs, best, other, cell.adv, on_b)
                out[est]["versus"][other] = {"diff": d, "lo": lo, "hi": hi}
    return out


def named_settings(cell: Cell, on_a: list, on_b: list, seed: int) -> dict:
    """Each named BiGPO setting of the cell's model (last-token, raw states, as the trainer records them),
    chosen in advance: its clusters and scores on half A, half B and all goals; a setting the model has no
    values for says why."""
    from agents.bigpo_settings import BIGPO_SETTINGS
    from agents.models import default_hidden_layer, layer_module_index
    model, out = cell.parts[0].model, {}
    for name, setting in BIGPO_SETTINGS.items():
        try:
            layer, eps = setting.layer_for(model), setting.eps_for(model)
            block = layer_module_index(default_hidden_layer(cell.n_layers) if layer is None else layer,
                                       cell.n_layers)
        except ValueError as exc:        # no calibration for the model, or a layer beyond its depth
            out[name] = {"reason": str(exc)}
            continue
        codes = clusters(cell, block, "last", "raw", eps)
        out[name] = {"setting": {"block": block + 1, "depth": (block + 1) / cell.n_layers, "pooling": "last",
                                 "centring": "raw", "eps": eps, "clusters": n_clusters(codes)},
                     **{part: score_point(cell, codes, goals, np.random.default_rng([seed, 2, k]))
                        for k, (part, goals) in enumerate((("on_a", on_a), ("on_b", on_b),
                                                           ("all", cell.members)))}}
    return out
