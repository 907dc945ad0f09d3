"""Two policies' evaluations of one held-out set, episode by episode: which episodes a change of policy
won or lost, whose score moved, and what each policy did there.

    python -m benchmarks.learning.env_table --out runs/webshop_table --compare warm_start gigpo_seed0
    python -m benchmarks.learning.episode_diff runs/webshop_table/evals/warm_start__test.json \\
        runs/webshop_table/evals/gigpo_seed0__test.json

The two evaluations must have played the same episodes (same tasks in the same order, as every
evaluation of a table does: fixed env and decoding seeds), so episode k of one is episode k of the other.
Actions come from the evaluation records (``agents.evaluation.episode_actions``); evaluations kept before
those were recorded show scores only.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def changed_episodes(a: dict, b: dict) -> list[dict]:
    """The episodes whose outcome (won, or score) differs between evaluations ``a`` and ``b``, in order,
    each with both policies' won, score, length and actions (None where not recorded)."""
    ea, eb = a["episodes"], b["episodes"]
    if ea.get("tasks") != eb.get("tasks"):
        raise ValueError("the two evaluations played different episodes (their task lists differ); compare "
                         "evaluations of one held-out set from one table")
    rows = []
    for k, task in enumerate(ea["tasks"]):
        side = [{"won": bool(e["won"][k]), "score": float(e["scores"][k]),
                 "length": _at(e, "lengths", k), "actions": _at(e, "actions", k),
                 "refused_steps": _at(e, "refused_steps", k)} for e in (ea, eb)]
        if side[0]["won"] != side[1]["won"] or not np.isclose(side[0]["score"], side[1]["score"]):
            rows.append({"episode": k, "task": task, "a": side[0], "b": side[1]})
    return rows


def _at(episodes: dict, key: str, k: int):
    values = episodes.get(key)
    return values[k] if values is not None else None


def diff_summary(a: dict, b: dict) -> dict:
    """Counts over all episodes: won by both, neither, gained (only ``b`` won), lost (only ``a`` won);
    scores up and down; mean lengths."""
    wa, wb = (np.asarray(e["episodes"]["won"], dtype=bool) for e in (a, b))
    sa, sb = (np.asarray(e["episodes"]["scores"], dtype=float) for e in (a, b))
    lengths = [e["episodes"].get("lengths") for e in (a, b)]
    return {"episodes": len(wa), "both": int(np.sum(wa & wb)), "neither": int(np.sum(~wa & ~wb)),
            "gained": int(np.sum(~wa & wb)), "lost": int(np.sum(wa & ~wb)),
            "score_up": int(np.sum(sb > sa + 1e-9)), "score_down": int(np.sum(sb < sa - 1e-9)),
            "mean_length": [float(np.mean(x)) if x else None for x in lengths]}


def format_diff(a: dict, b: dict, name_a: str = "a", name_b: str = "b", limit: int = 20) -> str:
    """The summary and the first ``limit`` changed episodes as text, one block an episode."""
    s = diff_summary(a, b)
    lengths = " -> ".join("?" if x is None else f"{x:.2f}" for x in s["mean_length"])
    lines = [f"{name_a} -> {name_b}, {s['episodes']} episodes: won by both {s['both']}, "
             f"neither {s['neither']}, "
             f"gained {s['gained']}, lost {s['lost']}; score up {s['score_up']}, down {s['score_down']}; "
             f"mean length {lengths}"]
    changed = changed_episodes(a, b)
    for row in changed[:limit]:
        lines.append(f"episode {row['episode']} (task {row['task']}):")
        for name, side in ((name_a, row["a"]), (name_b, row["b"])):
            acts = "(actions not recorded)" if side["actions"] is None else " | ".join(
                f"{act}{' [refused]' if j in (side['refused_steps'] or ()) else ''}"
                for j, act in enumerate(side["actions"]))
            lines.append(f"  {name}: {'won' if side['won'] else 'lost'}, score {side['score']:.3f}: {acts}")
    if len(changed) > limit:
        lines.append(f"... and {len(changed) - limit} more changed episodes (--limit)")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", type=Path, help="the first evaluation's JSON (e.g. the warm start's)")
    ap.add_argument("b", type=Path, help="the second evaluation's JSON, of the same held-out set")
    ap.add_argument("--limit", type=int, default=20, help="changed episodes to print")
    args = ap.parse_args(argv)
    for path in (args.a, args.b):
        if not path.is_file():
            ap.error(f"no evaluation file {path}")
    a, b = (json.loads(p.read_text()) for p in (args.a, args.b))
    try:
        print(format_diff(a, b, args.a.stem, args.b.stem, args.limit))
    except ValueError as exc:
        ap.error(str(exc))


if __name__ == "__main__":
    main()
