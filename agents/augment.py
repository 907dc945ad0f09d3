"""Renaming augmentation for TextCraft: consistent item renaming of SFT examples and of RL episodes.

    from agents.augment import make_augmenter, RenamedWorld
    rename = make_augmenter("textcraft", exclude=["stick"])      # keep held-out goal names out
    prompt, response = rename(np.random.default_rng(0), prompt, response)
    env = RenamedWorld(env, rename, rate=0.5)                    # half the episodes in a renamed world

Why: a small policy fine-tuned on a few hundred expert episodes memorises "goal X -> get 3 Y"
instead of reading the recipe lines, and fails on held-out goals (with the tiny model: 51% of train
goals won, 5% of test goals). Crafting is symbolic, so mapping every item name to another name, the
same way in the prompt and in the answer, gives an equally correct example that can only be solved
by copying from the prompt. The names drawn come from the recipe book minus ``exclude`` (the
held-out goals), so no held-out goal name is ever a target.
Measured on the tiny model (history 8, temperature 0.4, 77 goals per split): 1,600 SFT steps without
renaming win 11.7% of held-out and 80% of train goals; with half the examples renamed, 1,600 steps
are too few (2.6% / 26%), and 4,000 steps (48 min) give 13.0% / 64% (11.0% over 154 held-out
episodes), with the expert's next action still being learnt: teacher-forced, 39% of held-out and 84%
of train expert steps right, up from 29% / 44% at 2,000 steps. RL in renamed worlds (``rl_rename``)
did not help from that warm start: at rollout temperature 0.5 almost every group won all or none
of its episodes, and at 1.0 few won (0-9% per iteration), so GRPO had almost no signal; held-out 11.0% ->
9.7% (154 episodes). Both are off by default.
"""
from __future__ import annotations

import functools
import re
from typing import Callable, Iterable

import gymnasium as gym
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
        self.pattern = re.compile(rf"(?<=minecraft:)(?P<u>{under})(?![a-z_])"
                                  rf"|(?<![a-z_:])(?P<s>{spaced})(?![a-z_])")

    @staticmethod
    def _name(m: re.Match) -> str:
        return m.group("s") or m.group("u").replace("_", " ")

    def apply(self, text: str, mapping: dict[str, str]) -> str:
        """``text`` with every item name in ``mapping`` replaced (both surface forms); others kept."""
        def sub(m: re.Match) -> str:
            name = self._name(m)
            new = mapping.get(name, name)
            return new if m.group("s") else new.replace(" ", "_")
        return self.pattern.sub(sub, text)

    def permutation(self, rng: np.random.Generator) -> dict[str, str]:
        """A random bijection of the pool onto itself: a whole renamed world (excluded names stay)."""
        return dict(zip(self.pool, (self.pool[k] for k in rng.permutation(len(self.pool)))))

    def __call__(self, rng: np.random.Generator, prompt: str, response: str) -> tuple[str, str]:
        found = sorted({self._name(m) for t in (prompt, response) for m in self.pattern.finditer(t)})
        if not found:
            return prompt, response
        picks = rng.choice(len(self.pool), size=len(found), replace=False)
        mapping = {old: self.pool[k] for old, k in zip(found, picks)}
        return self.apply(prompt, mapping), self.apply(response, mapping)


class RenamedWorld(gym.Wrapper):
    """Plays a share of episodes in a consistently renamed world (RL's counterpart of SFT renaming).

    At each reset, with probability ``rate``, a permutation of the item names is drawn from the reset
    seed: the policy sees observations and admissible actions with renamed items, and its actions are
    mapped back before the env parses them. Every rollout of a group shares task and seed, so it shares
    the world too; ``info['anchor']`` (the env's own state hash) is left as is. A renamed episode can
    only be won by reading the recipe lines, the skill held-out goals need; names in ``renamer``'s
    exclude list (the held-out goals) are never used. ``info['renamed']`` says which episodes were.
    """

    TEXT_KEYS = ("admissible_actions", "useful_commands", "expert_action", "goal")

    def __init__(self, env: gym.Env, renamer: TextCraftRenamer, rate: float):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rename rate must be in [0, 1], got {rate}")
        super().__init__(env)
        self.renamer, self.rate = renamer, rate
        self._rng = np.random.default_rng()
        self._fwd: dict[str, str] | None = None
        self._back: dict[str, str] = {}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        rng = np.random.default_rng(seed) if seed is not None else self._rng
        self._fwd = self.renamer.permutation(rng) if rng.random() < self.rate else None
        self._back = {new: old for old, new in (self._fwd or {}).items()}
        obs, info = self.env.reset(seed=seed, options=options)
        return self._show(obs), self._show_info(info)

    def step(self, action: str):
        real = self.renamer.apply(action, self._back) if self._fwd else action
        obs, reward, terminated, truncated, info = self.env.step(real)
        return self._show(obs), reward, terminated, truncated, self._show_info(info)

    def _show(self, text: str) -> str:
        return self.renamer.apply(text, self._fwd) if self._fwd else text

    def _show_info(self, info: dict) -> dict:
        info = dict(info, renamed=self._fwd is not None)
        for key in self.TEXT_KEYS:
            if self._fwd and key in info:
                v = info[key]
                info[key] = [self._show(a) for a in v] if isinstance(v, (list, tuple)) else self._show(v)
        return info


AUGMENTERS: dict[str, Callable[..., Augmenter]] = {"textcraft": TextCraftRenamer}


def make_augmenter(env: str, exclude: Iterable[str] = ()) -> Augmenter:
    if env not in AUGMENTERS:
        raise ValueError(f"no renaming augmentation for env {env!r} (set sft_rename and rl_rename to 0); "
                         f"available: {sorted(AUGMENTERS)}")
    return AUGMENTERS[env](exclude)


def renamed_env_factory(make_env: Callable, env: str, rate: float, exclude: Iterable[str] = ()) -> Callable:
    """``make_env`` whose episodes play, with probability ``rate`` each, in a renamed world
    (``RenamedWorld``; names in ``exclude``, such as the held-out goals, are never drawn). The maker holds
    only what it needs, so it pickles for async and Ray envs."""
    return functools.partial(_renamed_env, make_env, make_augmenter(env, exclude), rate)


def _renamed_env(make_env: Callable, renamer: Augmenter, rate: float) -> RenamedWorld:
    return RenamedWorld(make_env(), renamer, rate)
