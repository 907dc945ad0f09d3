"""Expert for TextCraft: the shortest command sequence that crafts the goal from the shown
recipes, starting from any inventory.

    from bipace_envs.textcraft.expert import expert_plan
    expert_plan(book, "minecraft:oak_fence")
    # -> ['get 2 oak logs', 'craft 4 oak planks using 1 oak logs', 'craft 4 oak planks using 1 oak logs',
    #     'craft 4 stick using 2 oak planks', 'craft 3 oak fence using 2 stick, 4 oak planks']
    env.unwrapped.expert_actions()        # the same from the env's current inventory

Cost model: a ``get`` fetches any amount in one command and a ``craft`` makes one batch, so a
plan costs (base items still missing) + (craft commands). The search picks one recipe per
needed item and one member per needed tag (e.g. which planks make the sticks) and is exact
over those choices: a depth-first branch and bound over the recipe tree, visiting items
parents-first, so every branch point sees its final demand and the partial cost is a lower
bound. Options are tried cheapest-first (independent-subtree estimate), so the first plan is
usually optimal and the bound prunes the rest. Mixing two recipes for the same item inside one
plan is not considered (never shorter on this data). Only recipes of the goal's tree, which
are all shown at reset, are used, so an agent could in principle derive every plan from its
observation.
"""
from __future__ import annotations

import functools
import math

from .engine import goal_tree
from .recipes import RecipeBook, item_to_text

MAX_EVALUATIONS = 20_000   # safety cap on plan evaluations per search (never reached on this data)


@functools.lru_cache(maxsize=None)
def _graph(book: RecipeBook, goal: str):
    """(options per craftable name, names parents-first) for the goal's tree."""
    allowed = set(goal_tree(book, goal).recipes)
    options: dict[str, tuple] = {}
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:        # post-order DFS; reversed, it puts parents first
        if name in seen:
            return
        seen.add(name)
        if name in book.item_recipes:
            opts = tuple(r for r in book.item_recipes[name] if r in allowed)
            options[name] = opts
            for r in opts:
                for g in r.inputs:
                    visit(g.name)
        elif name in book.tag_recipes:
            opts = tuple(dict.fromkeys(r.output for r in book.tag_recipes[name]))
            options[name] = opts
            for m in opts:
                visit(m)
        order.append(name)

    visit(goal)
    order.reverse()
    return options, tuple(order)


@functools.lru_cache(maxsize=None)
def _estimate(book: RecipeBook, goal: str, name: str) -> int:
    """Commands to make ``name`` alone, ignoring sharing and batch sizes (for option order)."""
    options, _ = _graph(book, goal)
    if name not in options:
        return 1
    if name in book.item_recipes:
        return min(1 + sum(_estimate(book, goal, g.name) for g in r.inputs) for r in options[name])
    return min(_estimate(book, goal, m) for m in options[name])


def _choose(options, choice, name):
    """The option fixed for ``name``, or None when the search must branch on it."""
    if name not in choice:
        if len(options[name]) > 1:
            return None
        choice[name] = options[name][0]
    return choice[name]


def _evaluate(book, goal, options, order, choice, inventory, best):
    """Propagate demand parents-first. Returns ('branch', name) at the first needed name
    without a choice, ('pruned',) once the partial cost (a lower bound) reaches ``best``,
    else ('plan', cost, gets, crafts)."""
    need = {goal: 1}
    cost, gets, crafts = 0, [], []
    for name in order:
        want = need.get(name, 0)
        if want <= 0:
            continue
        if name not in options:                       # base item: one get of the shortfall
            short = want - inventory.get(name, 0)
            if short > 0:
                gets.append((name, short))
                cost += 1
        elif name in book.item_recipes:               # item: ceil(shortfall / batch) crafts
            short = want if name == goal else want - inventory.get(name, 0)
            if short <= 0:
                continue
            recipe = _choose(options, choice, name)
            if recipe is None:
                return ("branch", name)
            n = -(-short // recipe.count)
            crafts.append((recipe, n))
            cost += n
            for g in recipe.inputs:
                need[g.name] = need.get(g.name, 0) + g.count * n
        else:                                         # tag: the demand goes to one member
            member = _choose(options, choice, name)
            if member is None:
                return ("branch", name)
            need[member] = need.get(member, 0) + want
        if cost >= best:
            return ("pruned",)
    return ("plan", cost, gets, crafts, choice)


def _rank(book, goal, name, opts):
    if name in book.item_recipes:
        return sorted(opts, key=lambda r: 1 + sum(_estimate(book, goal, g.name) for g in r.inputs))
    return sorted(opts, key=lambda m: _estimate(book, goal, m))


def expert_plan(book: RecipeBook, goal: str, inventory: dict | None = None) -> list[str]:
    """Shortest command list that crafts ``goal`` starting from ``inventory`` (item id -> count)."""
    if goal not in book.item_recipes:
        raise ValueError(f"{goal!r} has no crafting recipe; pick a goal from list_tasks()")
    inventory = dict(inventory or {})
    options, order = _graph(book, goal)
    found = {"best": math.inf, "plan": None, "evals": 0}

    def search(choice: dict) -> None:
        found["evals"] += 1
        if found["evals"] > MAX_EVALUATIONS and found["plan"] is not None:
            return
        result = _evaluate(book, goal, options, order, dict(choice), inventory, found["best"])
        if result[0] == "plan":
            found["best"], found["plan"] = result[1], result
        elif result[0] == "branch":
            name = result[1]
            for opt in _rank(book, goal, name, options[name]):
                choice[name] = opt
                search(choice)
            del choice[name]

    search({})
    _, _, gets, crafts, choice = found["plan"]
    lines = [f"get {n} {item_to_text(item)}" for item, n in gets]
    for recipe, n in reversed(crafts):                 # children before parents
        text = "craft {} {} using {}".format(recipe.count, item_to_text(recipe.output), ", ".join(
            f"{g.count} {item_to_text(g.item or choice[g.tag])}" for g in recipe.inputs))
        lines.extend([text] * n)
    return lines


def expert_actions(state) -> list[str]:
    """Remaining shortest plan for ``state``: a dict with ``goal`` (item id or task id) and
    ``inventory`` (item id -> count), e.g. ``env.unwrapped.state``, or the env itself."""
    from .tasks import resolve_task
    if hasattr(state, "unwrapped"):
        return state.unwrapped.expert_actions()
    try:
        goal, inventory = state["goal"], state.get("inventory") or {}
    except (TypeError, KeyError):
        raise TypeError("expert_actions(state) takes {'goal': ..., 'inventory': {...}} "
                        f"or a TextCraft env, got {type(state).__name__}") from None
    from .recipes import load_book
    book = load_book()
    goal = goal if goal in book.item_recipes else resolve_task(goal, book)
    return expert_plan(book, goal, inventory)
