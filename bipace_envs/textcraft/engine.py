"""TextCraft game rules: the episode layout (shown recipe lines) and the command interpreter.

    from bipace_envs.textcraft.engine import Crafter, layout
    lines = layout(book, "minecraft:stick", seed=0)       # tuple of "craft ..." lines
    game = Crafter(book, "minecraft:stick")
    game.execute("get 1 oak logs")   # -> Outcome(text='Got 1 oak logs', valid=True, ...)

Semantics and message strings are the reference's (``textcraft/env.py``): the commands are
matched with the same case-sensitive ``re.match`` patterns (a prefix match, ``.`` stops at a
newline), counts must equal the recipe's, a tag must be given as a concrete member. The one
deliberate difference: a count too long for ``int()`` (over 4300 digits) crashed the
reference with ValueError; here it answers ``Could not execute {action}``.

Layout = the reference's first reset on a fresh table: the goal's recipe tree (the reference
walks it while appending to its own lists, so the walk, and hence the number of random draws,
is reproduced on a private copy), then for every ingredient of every walked recipe up to 10
recipes using it are sampled, new lines join the distractor pool, 10 of the pool are sampled
and all lines are shuffled, all with ``random.Random(seed)``. The reference listed its line
sets in hash order; we list them in first-appearance order, so one seed gives one layout.
"""
from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from typing import NamedTuple

from .recipes import PREFIX, Recipe, RecipeBook, item_to_text

MAX_DISTRACTORS = 10
_CRAFT = re.compile(r"craft (.*) using (.*)")
_GET = re.compile(r"get ([0-9]+) (.*)")
_INVENTORY = re.compile(r"inventory")
_COUNT = re.compile(r"([0-9]+) (.*)")


# ----------------------------------------------------------------------------- layout
def walk_tree(book: RecipeBook, goal: str) -> list[Recipe]:
    """The recipe list the reference's ``traverse_recipe_tree`` returns on a fresh table,
    duplicates included (it iterates each list while appending the sub-trees to it)."""
    lists: dict[str, list | None] = {}

    def walk(name: str, visited: frozenset) -> list:
        if name in visited:
            return []
        if name not in lists:
            src = book.recipes_for(name)
            lists[name] = list(src) if src else None
        recs = lists[name]
        if recs is None:
            return []
        below = visited | {name}
        for r in recs:            # grows while we iterate, as in the reference
            for g in r.inputs:
                recs.extend(walk(g.name, below))
        return recs

    return list(walk(goal, frozenset()))


@dataclass(frozen=True)
class Tree:
    """What a goal's layout needs, computed once per goal."""
    lines: tuple[str, ...]                   # tree lines, first-appearance order
    pools: tuple[tuple[str, ...], ...]       # one distractor draw per walked ingredient
    recipes: tuple[Recipe, ...]              # distinct tree recipes, same order as lines


@functools.lru_cache(maxsize=None)
def _use_lines(book: RecipeBook) -> dict[str, tuple[str, ...]]:
    return {name: tuple(r.line for r in rs) for name, rs in book.uses.items()}


@functools.lru_cache(maxsize=None)
def goal_tree(book: RecipeBook, goal: str) -> Tree:
    walked = walk_tree(book, goal)
    first: dict[str, Recipe] = {}
    for r in walked:
        first.setdefault(r.line, r)
    uses = _use_lines(book)
    pools = tuple(uses[g.name] for r in walked for g in r.inputs if g.name in uses)
    return Tree(tuple(first), pools, tuple(first.values()))


@functools.lru_cache(maxsize=8192)
def layout(book: RecipeBook, goal: str, seed: int) -> tuple[str, ...]:
    """The shown crafting lines of the episode (goal, seed), in display order."""
    tree = goal_tree(book, goal)
    rng = random.Random(seed)
    shown = set(tree.lines)
    pool: dict[str, None] = {}
    for population in tree.pools:
        for line in rng.sample(population, min(len(population), MAX_DISTRACTORS)):
            if line not in shown:
                pool[line] = None
    pool_list = list(pool)
    lines = list(tree.lines) + rng.sample(pool_list, min(len(pool_list), MAX_DISTRACTORS))
    rng.shuffle(lines)
    return tuple(lines)


def reset_text(lines, goal: str) -> str:
    return "Crafting commands:\n{}\n\nGoal: craft {}.".format("\n".join(lines), item_to_text(goal))


# ----------------------------------------------------------------------------- commands
class Outcome(NamedTuple):
    """Result of one command (a NamedTuple: the step loop makes millions of these)."""
    text: str                 # the observation
    valid: bool               # parsed as a command (not "Could not execute"/"Wrong item format")
    succeeded: bool           # the command did what it asked (got, crafted, listed)
    item: str | None = None   # item id gained (got or crafted)
    crafted: bool = False     # the item came from a craft


def not_executed(action: str) -> Outcome:
    """The answer to anything that is not a command (the reference's words)."""
    return Outcome(f"Could not execute {action}", False, False)


class _Overflow(Exception):
    """A count with more digits than ``int()`` accepts (rare: kept off the hot path)."""


def _int(digits: str) -> int:
    try:
        return int(digits)
    except ValueError:
        raise _Overflow from None


def match_recipe(book: RecipeBook, output: str | None, given) -> Recipe | None:
    """First recipe of ``output`` whose ingredients the ``(item, tag, count)`` list ``given``
    matches exactly (the reference's ``CraftingTree.craft``)."""
    item_tag = book.item_tag
    for r in book.item_recipes.get(output, ()):
        rest = list(given)
        for g in r.inputs:
            for j, (aid, atag, count) in enumerate(rest):
                if (aid == g.item) if g.item is not None else (atag == g.tag or item_tag.get(aid) == g.tag):
                    break
            else:
                break
            if count != g.count:
                break
            del rest[j]
        else:
            if not rest:
                return r
    return None


class Crafter:
    """The inventory of one episode and the command interpreter acting on it."""

    __slots__ = ("book", "goal", "inventory")

    def __init__(self, book: RecipeBook, goal: str):
        self.book, self.goal = book, goal
        self.inventory: dict[str, int] = {}

    def _obj(self, text: str) -> tuple[str | None, str | None]:
        """Agent text -> (item id, tag) as the reference's ``item_str_to_obj``."""
        name = PREFIX + text.replace(" ", "_")
        return (None, name) if name in self.book.tags else (name, None)

    def execute(self, action: str) -> Outcome:
        try:
            m = _CRAFT.match(action)
            if m:
                return self._craft(m.group(1), m.group(2))
            m = _GET.match(action)
            if m:
                return self._get(m.group(2), _int(m.group(1)))
            if _INVENTORY.match(action):
                return Outcome(self.inventory_text(), True, True)
        except _Overflow:
            pass
        return not_executed(action)

    def inventory_text(self) -> str:
        if not self.inventory:
            return "Inventory: You are not carrying anything."
        return "Inventory: " + "".join(f"[{item_to_text(k)}] ({v}) " for k, v in self.inventory.items())

    def _get(self, text: str, amount: int) -> Outcome:
        book = self.book
        item, tag = self._obj(text)
        name = item or tag
        if name in book.item_recipes or name in book.tag_recipes or item is None or item not in book.items:
            return Outcome(f"Could not find {text}", True, False)
        self.inventory[item] = self.inventory.get(item, 0) + amount
        return Outcome(f"Got {amount} {text}", True, True, item)

    def _craft(self, out_text: str, in_text: str) -> Outcome:
        m = _COUNT.match(out_text)
        out_item, out_tag = self._obj(m.group(2)) if m else self._obj(out_text)
        out_count = _int(m.group(1)) if m else 1
        given = []
        for part in in_text.split(","):
            part = part.strip()
            pm = _COUNT.match(part)
            if not pm:
                return Outcome(f"Wrong item format: {part}", False, False)
            given.append(self._obj(pm.group(2)) + (_int(pm.group(1)),))
        inv = self.inventory
        for item, _, count in given:
            if item not in inv or inv[item] < count:
                return Outcome(f"Could not find enough items to craft {out_item}", True, False)
        recipe = match_recipe(self.book, out_item, given)
        if recipe is None:
            return Outcome("Could not find a valid recipe for ItemTagWithCount(item_tag=ItemTag("
                           f"tag={out_tag!r}, item_id={out_item!r}), count={out_count})", True, False)
        for item, _, count in given:
            inv[item] -= count
            if inv[item] == 0:
                del inv[item]
        inv[recipe.output] = inv.get(recipe.output, 0) + recipe.count
        return Outcome(f"Crafted {recipe.count} {recipe.output}", True, True, recipe.output, True)
