"""Recipe loading: the spec's counts, the load-order-dependent choices, equality with the
reference's own tables, and a read-only book."""
from __future__ import annotations

import collections

import pytest

from bipace_envs.textcraft.recipes import LOAD_FIRST, build_book, load_order


def test_counts_match_the_spec(book):
    assert len(book.recipes) == 613
    depths = collections.Counter(book.depth[g] for g in book.goal_order if book.depth[g] >= 1)
    assert dict(depths) == {1: 147, 2: 274, 3: 112, 4: 11}


def test_recorded_game_recipes_are_kept(book):
    lines = {r.line for r in book.recipes}
    for line in ("craft 9 gold nugget using 1 gold ingot", "craft 9 iron nugget using 1 iron ingot",
                 "craft 4 honey bottle using 1 honey block, 4 glass bottle"):
        assert line in lines


def test_load_order_puts_the_three_first_then_sorted():
    names = ["b.json", "honey_bottle.json", "a.json", "iron_nugget.json", "gold_nugget.json"]
    assert load_order(names) == list(LOAD_FIRST) + ["a.json", "b.json"]


def test_order_matters_which_is_why_we_pin_it(book):
    """Loading in plain sorted order keeps a different recipe set (the cycle rule)."""
    import json
    from bipace_envs.textcraft.recipes import recipe_dir
    root = recipe_dir()
    files = [(n, json.loads((root / n).read_text())) for n in sorted(book.files)]
    other = build_book(files)
    assert {r.line for r in other.recipes} != {r.line for r in book.recipes}


def test_book_equals_the_reference_tables(book, reference):
    tree = reference.tree
    assert [(k, [r.recipe_str for r in v]) for k, v in tree.itemid_recipes.items()] == \
        [(k, [r.line for r in v]) for k, v in book.item_recipes.items()]
    assert [(k, [r.recipe_str for r in v]) for k, v in tree.tag_recipes.items()] == \
        [(k, [r.line for r in v]) for k, v in book.tag_recipes.items()]
    assert tree.tag_set == set(book.tags) and tree.itemid_set == set(book.items)
    assert tree.item_id_to_tag == dict(book.item_tag)
    theirs = {k: tree.get_min_depth(k) for k in tree.itemid_recipes}
    assert theirs == {k: book.depth[k] for k in book.item_recipes}


def test_book_is_read_only(book):
    with pytest.raises(TypeError):
        book.item_recipes["minecraft:stick"] = ()
    with pytest.raises(AttributeError):
        book.item_recipes["minecraft:stick"].append(None)
