"""Where ALFWorld games come from, and how far a state is from the goal.

Real games: ``<data_dir>/json_2.1.1/<split>/<task>/<trial>/{game.tw-pddl,traj_data.json}`` as laid out by
``alfworld-download`` (``data_dir`` may also point at ``json_2.1.1`` itself). Task ids are the trial
folder relative to ``json_2.1.1``, e.g. ``valid_seen/pick_two_obj_and_place-AlarmClock-None-Dresser-313/
trial_T20190907_165826_194855``. Like the reference loader we skip ``movable``/``Sliced`` trials and games
marked unsolvable; unlike it, finding nothing is an error that lists what was looked for.

``goal_conditions`` is ALFRED's goal-condition success (``alfworld/env/tasks.py``) computed from the
engine's PDDL facts instead of THOR metadata: text games only report ``won``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

TASK_TYPES = {1: "pick_and_place_simple", 2: "look_at_obj_in_light", 3: "pick_clean_then_place_in_recep",
              4: "pick_heat_then_place_in_recep", 5: "pick_cool_then_place_in_recep",
              6: "pick_two_obj_and_place"}
REAL_SPLITS = ("train", "valid_seen", "valid_unseen")
# alfworld's config names for the same splits.
SPLIT_ALIASES = {"eval_in_distribution": "valid_seen", "eval_out_of_distribution": "valid_unseen"}


def resolve_task_types(task_types) -> tuple[str, ...]:
    """Names or alfworld's ids (1-6) -> task type names, in the canonical order."""
    if task_types is None:
        return tuple(TASK_TYPES.values())
    if isinstance(task_types, (str, int)):
        task_types = [task_types]
    names = set()
    for t in task_types:
        name = TASK_TYPES.get(t) if isinstance(t, int) else t
        if name not in TASK_TYPES.values():
            raise ValueError(f"unknown ALFWorld task type {t!r}; use one of {list(TASK_TYPES.values())} "
                             f"or their ids 1-6")
        names.add(name)
    if not names:
        raise ValueError("task_types is empty: give at least one ALFWorld task type")
    return tuple(n for n in TASK_TYPES.values() if n in names)


def find_data_root(data_dir) -> Path | None:
    """``data_dir`` (or $ALFWORLD_DATA) -> the json_2.1.1 folder; None when neither is set."""
    if data_dir is None:
        data_dir = os.environ.get("ALFWORLD_DATA") or None
        # Importing alfworld sets ALFWORLD_DATA to its (usually empty) default folder: that is not a
        # user's request for real data.
        default = Path(os.path.expanduser("~/.cache/alfworld"))
        if data_dir is not None and Path(data_dir) == default and not (default / "json_2.1.1").is_dir():
            data_dir = None
    if data_dir is None:
        return None
    root = Path(os.path.expandvars(os.path.expanduser(str(data_dir))))
    if root.name != "json_2.1.1" and (root / "json_2.1.1").is_dir():
        return root / "json_2.1.1"
    if root.name == "json_2.1.1" and root.is_dir():
        return root
    raise FileNotFoundError(
        f"ALFWorld data folder not found: looked for {root / 'json_2.1.1'} "
        f"(and {root} itself as json_2.1.1). "
        f"Point data_dir / ALFWORLD_DATA at the folder that holds json_2.1.1/{{{','.join(REAL_SPLITS)}}}, "
        "or leave both unset to use generated games.")


def list_real_games(root: Path, split: str, task_types: tuple[str, ...]) -> dict[str, str]:
    """task_id -> game file for one split of real data, sorted by id."""
    split = SPLIT_ALIASES.get(split, split)
    if split not in REAL_SPLITS:
        raise ValueError(f"unknown split {split!r} for real ALFWorld data; use one of {REAL_SPLITS}")
    split_dir = root / split
    games, skipped = {}, {"movable/Sliced": 0, "other task type": 0, "no game.tw-pddl": 0, "unsolvable": 0}
    if split_dir.is_dir():
        for traj in sorted(split_dir.glob("*/*/traj_data.json")):
            trial = traj.parent
            if "movable" in str(trial) or "Sliced" in str(trial):
                skipped["movable/Sliced"] += 1
                continue
            if trial.parent.name.split("-")[0] not in task_types:
                skipped["other task type"] += 1
                continue
            game = trial / "game.tw-pddl"
            if not game.is_file():
                skipped["no game.tw-pddl"] += 1
                continue
            with open(game) as f:
                if not json.load(f).get("solvable"):
                    skipped["unsolvable"] += 1
                    continue
            games[f"{split}/{trial.parent.name}/{trial.name}"] = str(game)
    if not games:
        raise FileNotFoundError(
            f"no playable ALFWorld games in {split_dir} "
            f"(looked for {split_dir}/<task>/<trial>/traj_data.json "
            f"with game.tw-pddl beside it, task types {list(task_types)}; skipped: {skipped}). "
            "Run alfworld-download / alfworld-generate there, or unset data_dir to use generated games.")
    return games


def _typed(facts, pred: str) -> dict[str, str]:
    return {f.arguments[0].name: f.arguments[1].name.lower() for f in facts if f.name == pred}


def goal_conditions(facts, params: dict) -> tuple[int, int]:
    """(satisfied, total) goal conditions of an ALFWorld task given the engine's raw facts
    (``state["_facts"]``) and the game's ``traj_data["pddl_params"]`` plus ``task_type``."""
    task = params["task_type"]
    obj_t = params["object_target"].lower() + "type"
    otype, rtype = _typed(facts, "objecttype"), _typed(facts, "receptacletype")
    objs = {o for o, t in otype.items() if t == obj_t}
    rel = [(f.name, [a.name for a in f.arguments]) for f in facts]
    holds = {args[1] for name, args in rel if name == "holds"}
    if task == "look_at_obj_in_light":
        lamp_t = params["toggle_target"].lower() + "type"
        lamps = {o for o, t in otype.items() if t == lamp_t}
        agent_at = {args[1] for name, args in rel if name == "atlocation"}
        recep_at = {args[0]: args[1] for name, args in rel if name == "receptacleatlocation"}
        toggled = {args[0] for name, args in rel if name == "istoggled"}
        lit = any(args[0] in lamps and args[0] in toggled and recep_at.get(args[1]) in agent_at
                  for name, args in rel if name == "inreceptacle")
        return int(bool(objs & holds)) + int(lit), 2
    par_t = params["parent_target"].lower() + "type"
    receps = {r for r, t in rtype.items() if t == par_t}
    placed: dict[str, set] = {}
    for name, args in rel:
        if name == "inreceptacle" and args[0] in objs and args[1] in receps:
            placed.setdefault(args[1], set()).add(args[0])
    in_place = set().union(*placed.values()) if placed else set()
    if task == "pick_and_place_simple":
        return int(bool(in_place)), 1
    if task == "pick_two_obj_and_place":
        return min(max((len(v) for v in placed.values()), default=0), 2), 2
    state_pred = {"pick_clean_then_place_in_recep": "isclean", "pick_heat_then_place_in_recep": "ishot",
                  "pick_cool_then_place_in_recep": "iscool"}[task]
    changed = {args[0] for name, args in rel if name == state_pred and args[0] in objs}
    return int(bool(in_place)) + int(bool(changed)) + int(bool(in_place & changed)), 3


def task_type_of(task_id: str) -> str:
    """The task type of a task id: real ``valid_seen/pick_two_obj_and_place-Box-.../trial_...`` or
    generated ``gen/train/pick_two_obj_and_place/00042``."""
    parts = task_id.split("/")
    return parts[2] if parts[0] == "gen" else parts[1].split("-")[0]


def spread_subset(games: dict[str, str], per_type: int) -> dict[str, str]:
    """A fixed subset of ``games`` (task_id -> file, ids ``<split>/<task type>-.../<trial>``): ``per_type``
    games of each task type, evenly spaced over that type's games in id order (every game of a type that
    has fewer), so the subset spreads over the split's objects and rooms rather than taking the
    alphabetically first ones."""
    if per_type < 1:
        raise ValueError(f"games_per_task must be >= 1, got {per_type}")
    by_type: dict[str, list[str]] = {}
    for task_id in sorted(games):
        by_type.setdefault(task_type_of(task_id), []).append(task_id)
    keep = []
    for ids in by_type.values():
        n = min(per_type, len(ids))
        keep += [ids[int(k * len(ids) / n)] for k in range(n)]
    return {t: games[t] for t in sorted(keep)}
