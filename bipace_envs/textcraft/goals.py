"""What a TextCraft goal demands: its crafting depth and the ingredients of its simplest recipe.

    from bipace_envs.textcraft.goals import goal_depths, goal_ingredients, single_recipe_goals
    goal_depths()["stick"]          # 1: crafted from base items
    goal_ingredients()["stick"]     # distinct inputs of its simplest recipe

Each mapping holds a goal under every name an evaluation may record it by (the item id with and without
``minecraft:``, and its text form), so per-goal tallies of any source can be split by depth or shape.
Results split this way show where RL learned: depth-1 goals that need two or more ingredients are the
ones a warm start loses.
"""
from __future__ import annotations

from functools import lru_cache

from .recipes import PREFIX, item_to_text, load_book


def _every_name(goal: str, value, out: dict) -> None:
    out[goal] = out[goal.replace(PREFIX, "")] = out[item_to_text(goal)] = value


@lru_cache(maxsize=1)
def _depths() -> dict[str, int]:
    out: dict[str, int] = {}
    for goal, depth in load_book().depth.items():
        _every_name(goal, depth, out)
    return out


@lru_cache(maxsize=1)
def _ingredients() -> dict[str, int]:
    book, out = load_book(), {}
    for goal in book.depth:
        recipes = book.recipes_for(goal)
        if recipes:
            _every_name(goal, min(len({i.name for i in r.inputs}) for r in recipes), out)
    return out


def goal_depths() -> dict[str, int]:
    """Crafting depth of every goal (1 = crafted from base items)."""
    return dict(_depths())


def goal_ingredients() -> dict[str, int]:
    """Distinct ingredients of each craftable goal's simplest recipe."""
    return dict(_ingredients())


def single_recipe_goals() -> set[str]:
    """Goals (ids without ``minecraft:``) with exactly one recipe: no choice of ingredients."""
    book = load_book()
    return {g.replace(PREFIX, "") for g in book.depth if len(book.recipes_for(g)) == 1}
