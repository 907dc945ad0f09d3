"""SFT data augmentation: consistent renaming of TextCraft items in an (prompt, response) example.

    from agents.augment import make_augmenter
    rename = make_augmenter("textcraft", exclude=["stick"])      # keep held-out goal names out
    prompt, response = rename(np.random.default_rng(0), prompt, response)

Why: a small policy fine-tuned on a few hundred expert episodes memorises "goal X -> get 3 Y"
instead of reading the recipe lines, and fails on held-out goals (with the tiny model: 51% of train
goals won, 5% of test goals). Crafting is symbolic, so mapping every item name in an example to
another name, the same way in the prompt and in the answer, gives an equally correct example that
can only be solved by copying from the prompt. The names drawn come from the recipe book minus
``exclude`` (the held-out goals), so no held-out goal name is ever an SFT target.
Measured on the tiny model with 1,600 SFT steps and half the examples renamed, it did not help:
held-out 2.6-3.9% and train 12-26%, against 5-12% / 51-80% without it. Learning to copy takes more
steps than that budget, so ``sft_rename`` is off by default.
"""
from __future__ import annotations

import functools
import re
from typing import Callable, Iterable

import numpy as np

Augmenter = Callable[[np.random.Generator, str, str], tuple[str, str]]


@functools.lru_cache(maxsize=1)
def _textcraft_names() -> tuple[str, ...]:
    from bipace_envs.textcraft.recipes import item_to_text, load_book
    book = load_book()
    return tuple(sorted({item_to_text(n) for n in (*book.items, *book.tags)}))


class TextCraftRenamer:
    """Maps each item name found in an example to a distinct random name; both surface forms are
    handled: ``oak planks`` (commands, inventory) and ``minecraft:oak_planks`` (craft messages)."""

    def __init__(self, exclude: Iterable[str] = ()):
        names = _textcraft_names()
        drop = {e.replace("minecraft:", "").replace("_", " ") for e in exclude}
        self.pool = [n for n in names if n not in drop]
        if len(self.pool) < 50:
            raise ValueError(f"only {len(self.pool)} names left to rename with after excluding {len(drop)}")
        # One pass over both forms (so a new name is never renamed again); longest names first, so
        # "dark oak planks" wins over "oak planks"; no letter may touch either end of a match.
        by_len = sorted(names, key=len, reverse=True)
        under = "|".join(re.escape(n.replace(" ", "_")) for n in by_len)
        spaced = "|".join(re.escape(n) for n in by_len)
        self.pattern = re.compile(rf"(?<=minecraft:)(?P<u>{under})(?![a-z_])|(?<![a-z_:])(?P<s>{spaced})(?![a-z_])")

    @staticmethod
    def _name(m: re.Match) -> str:
        return m.group("s") or m.group("u").replace("_", " ")

    def __call__(self, rng: np.random.Generator, prompt: str, response: str) -> tuple[str, str]:
        found = sorted({self._name(m) for t in (prompt, response) for m in self.pattern.finditer(t)})
        if not found:
            return prompt, response
        picks = rng.choice(len(self.pool), size=len(found), replace=False)
        mapping = {old: self.pool[k] for old, k in zip(found, picks)}

        def sub(m: re.Match) -> str:
            new = mapping[self._name(m)]
            return new if m.group("s") else new.replace(" ", "_")
        return self.pattern.sub(sub, prompt), self.pattern.sub(sub, response)


AUGMENTERS: dict[str, Callable[..., Augmenter]] = {"textcraft": TextCraftRenamer}


def make_augmenter(env: str, exclude: Iterable[str] = ()) -> Augmenter:
    if env not in AUGMENTERS:
        raise ValueError(f"no SFT augmentation for env {env!r} (set sft_rename=0); available: {sorted(AUGMENTERS)}")
    return AUGMENTERS[env](exclude)
