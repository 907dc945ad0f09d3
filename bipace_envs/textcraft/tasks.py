"""TextCraft goal presets, splits and task ids.

    from bipace_envs.textcraft.tasks import list_tasks
    list_tasks("adapt", "test")                    # ADaPT's 200 test goals, in seed order
    list_tasks("agentgym", "train", depths=(1, 2)) # AgentGym train goals of depth 1 or 2

A task id is the goal item without the ``minecraft:`` prefix (``"dark_oak_sign"``);
``resolve_task`` also takes ``"minecraft:dark_oak_sign"``, ``"dark oak sign"`` and AgentGym's
``"textcraft_<data_idx>"``.

Presets (a registry; every goal has depth >= 1, i.e. needs at least one craft):
- ``adapt`` (ADaPT): ``test`` is ADaPT's own 200 evaluation goals in seed order, read from
  ``data/adapt_test_goals.json`` (seed -> goal for seeds 0-199 as recorded in ADaPT's runs:
  11 goals of depth 4, 112 of depth 3, 77 of depth 2), so ``reset(seed=s)`` plays ADaPT's goal
  for seed s. ADaPT sorted its goals deepest first with ties in the authors' file-listing order,
  which no rule reproduces; hence the recorded list. ``train`` = the other goals, deepest first
  (ties in recipe-load order); under the default depths 2-4 these are the 197 remaining goals of
  depth >= 2, and ``depths=(1, 2)`` adds the depth-1 goals. ``all`` = test then train, so seeds
  0-199 play ADaPT's goals there too. A depth filter drops goals but keeps the order: with
  ``depths=(2, 3)`` seed s plays the s-th kept goal, no longer ADaPT's.
  The distractor lines and their shuffle cannot match ADaPT's episodes: they came from the
  recipe lists in the authors' file order (see ``env.py``).
- ``agentgym`` (AgentGym): goals sorted shallowest first; ``data_idx`` i is the i-th. AgentGym
  always lays out the lines with seed 42, so the layout depends on the task only. AgentGym's
  own 374-train / 100-test id lists live in its Hugging Face data (not available offline), so
  the split here is explicit and depth-stratified: ``test`` = the 100 indices
  ``(2k+1)*544 // 200`` (k = 0..99), ``train`` = 374 indices spread the same way over the
  remaining 444, leaving 70 goals in neither (as AgentGym leaves 70 out). Pass AgentGym's
  own ids as ``textcraft_<i>`` task ids to play their exact split.
The ``depths`` filter keeps the preset's order and split and drops other depths, e.g.
``depths=(2, 3)`` for the BiPACE setting or ``(1, 2)`` for a curriculum.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Callable, Sequence

from .recipes import PREFIX, RecipeBook, load_book


@dataclass(frozen=True)
class Preset:
    """How goals are ordered, split and laid out."""
    name: str
    order: Callable[[RecipeBook], tuple[str, ...]]   # all goals of depth >= 1, preset order
    default_depths: tuple[int, ...]            # depths kept when ``depths=None``
    layout_seed: int | None                    # fixed seed of the shown lines; None = reset seed
    reward_on_get: bool                        # also reward a ``get`` of the goal (AgentGym)
    splits: Callable[[int], dict[str, list[int]]]   # n goals -> {split: indices into the order}


def _by_depth(book: RecipeBook, deepest_first: bool) -> list[str]:
    """Goals of depth >= 1 sorted by depth (stable: ties keep recipe-load order)."""
    goals = [g for g in book.goal_order if book.depth[g] >= 1]
    return sorted(goals, key=lambda g: -book.depth[g] if deepest_first else book.depth[g])


ADAPT_TEST_SIZE = 200


@functools.lru_cache(maxsize=1)
def adapt_test_goals() -> tuple[str, ...]:
    """ADaPT's recorded test goals (display names), index = seed."""
    text = resources.files(__package__).joinpath("data", "adapt_test_goals.json").read_text()
    rows = json.loads(text)
    if [r["seed"] for r in rows] != list(range(ADAPT_TEST_SIZE)):
        raise ValueError("adapt_test_goals.json must list seeds 0-199 in order")
    return tuple(r["goal"] for r in rows)


def _adapt_order(book: RecipeBook) -> tuple[str, ...]:
    test = tuple(PREFIX + g.replace(" ", "_") for g in adapt_test_goals())
    missing = [g for g in test if book.depth.get(g, 0) < 2]
    if missing or len(set(test)) != len(test):
        raise ValueError(f"ADaPT test goals not craftable at depth >= 2 or repeated: {missing[:5]}")
    chosen = set(test)
    return test + tuple(g for g in _by_depth(book, True) if g not in chosen)


def _adapt_splits(n: int) -> dict[str, list[int]]:
    return {"test": list(range(ADAPT_TEST_SIZE)), "train": list(range(ADAPT_TEST_SIZE, n)),
            "all": list(range(n))}


def _spread(indices: list[int], k: int) -> list[int]:
    """k indices evenly spread over ``indices`` (keeps the depth mix of a sorted list)."""
    n = len(indices)
    return [indices[(2 * j + 1) * n // (2 * k)] for j in range(min(k, n))]


def _agentgym_splits(n: int) -> dict[str, list[int]]:
    test = _spread(list(range(n)), 100)
    rest = sorted(set(range(n)) - set(test))
    return {"test": test, "train": sorted(_spread(rest, 374)), "all": list(range(n))}


def _agentgym_order(book: RecipeBook) -> tuple[str, ...]:
    return tuple(_by_depth(book, False))


PRESETS: dict[str, Preset] = {
    "adapt": Preset("adapt", _adapt_order, (2, 3, 4), None, False, _adapt_splits),
    "agentgym": Preset("agentgym", _agentgym_order, (1, 2, 3, 4), 42, True, _agentgym_splits),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown TextCraft preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]


def ordered_goals(preset: str, book: RecipeBook | None = None) -> tuple[str, ...]:
    """All goals of depth >= 1 (item ids) in the preset's order."""
    return get_preset(preset).order(book or load_book())


def check_depths(depths, book: RecipeBook | None = None) -> tuple[int, ...]:
    book = book or load_book()
    have = sorted({book.depth[g] for g in book.goal_order if book.depth[g] >= 1})
    if isinstance(depths, int):
        depths = (depths,)
    depths = tuple(depths)
    bad = [d for d in depths if not isinstance(d, int) or d not in have]
    if bad or not depths:
        raise ValueError(f"depths={depths!r}: goal depths run over {have}; pass a non-empty "
                         "tuple of them, e.g. depths=(2, 3)")
    return depths


def goal_pool(preset: str, split: str = "all", depths: Sequence[int] | None = None,
              book: RecipeBook | None = None) -> tuple[str, ...]:
    """Goals (item ids) of a preset's split, filtered by depth, in the preset's order."""
    book = book or load_book()
    p = get_preset(preset)
    order = ordered_goals(preset, book)
    splits = p.splits(len(order))
    if split not in splits:
        raise ValueError(f"unknown split {split!r} for preset {preset!r}; choose one of {sorted(splits)}")
    keep = set(check_depths(p.default_depths if depths is None else depths, book))
    pool = tuple(order[i] for i in splits[split] if book.depth[order[i]] in keep)
    if not pool:
        raise ValueError(f"preset {preset!r} split {split!r} has no goal of depth {sorted(keep)}")
    return pool


def task_id_of(goal: str) -> str:
    return goal[len(PREFIX):] if goal.startswith(PREFIX) else goal


def list_tasks(preset: str = "adapt", split: str = "all", depths: Sequence[int] | None = None) -> list[str]:
    """Task ids of a split, in the preset's order (pass one as ``options={"task_id": ...}``)."""
    return [task_id_of(g) for g in goal_pool(preset, split, depths)]


_AGENTGYM_ID = re.compile(r"textcraft_([0-9]+)")


def resolve_task(task_id, book: RecipeBook | None = None) -> str:
    """Task id -> goal item id; any craftable goal of depth >= 1 is accepted."""
    book = book or load_book()
    if not isinstance(task_id, str):
        raise TypeError("task_id must be a str such as 'stick' or 'textcraft_12', got "
                        f"{type(task_id).__name__}")
    m = _AGENTGYM_ID.fullmatch(task_id)
    if m:
        order = ordered_goals("agentgym", book)
        i = int(m.group(1))
        if i >= len(order):
            raise ValueError(f"task_id {task_id!r}: AgentGym data_idx runs from 0 to {len(order) - 1}")
        return order[i]
    goal = task_id if task_id.startswith(PREFIX) else PREFIX + task_id.strip().replace(" ", "_")
    if goal not in book.item_recipes or book.depth[goal] < 1:
        raise ValueError(f"unknown TextCraft task_id {task_id!r}: use an id from "
                         "bipace_envs.textcraft.list_tasks(preset, split, depths), e.g. 'stick'")
    return goal
