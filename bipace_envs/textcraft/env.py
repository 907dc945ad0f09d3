"""The TextCraft gymnasium environment (``bipace/TextCraft-v0``).

    import gymnasium as gym, bipace_envs
    env = gym.make("bipace/TextCraft-v0", preset="adapt", split="test", depths=(2, 3), max_steps=50)
    obs, info = env.reset(seed=0)                      # or options={"task_id": "stick"}
    obs, r, term, trunc, info = env.step(info["admissible_actions"][0])
    env.unwrapped.expert_actions()                     # shortest remaining plan

See ``TextCraftEnv`` for the full description; the rules are in ``engine.py``, goal presets and
splits in ``tasks.py``, the expert in ``expert.py``.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, fields
from typing import Any, Sequence

import gymnasium as gym

from ..common import (MAX_TEXT_LENGTH, CommandText, UnicodeText, episode_ended, is_one_command, obs_hash,
                      positive_int)
from .engine import Crafter, goal_tree, layout, not_executed, reset_text
from .expert import expert_plan
from .recipes import PREFIX, RecipeBook, item_to_text, load_book
from .tasks import get_preset, goal_pool, resolve_task, task_id_of

MAX_VARIANTS = 16   # concrete variants listed per shown line with tag ingredients


@dataclass(frozen=True)
class TextCraftConfig:
    """Constructor arguments of ``TextCraftEnv`` (all keyword)."""
    preset: str = "adapt"                   # goal order/layout rules: "adapt" or "agentgym" (tasks.PRESETS)
    split: str = "all"                      # "train", "test" or "all" of the preset (tasks.py)
    depths: Sequence[int] | None = None     # keep goals of these depths; None = preset default
    max_steps: int = 50                     # steps before truncated=True (BiPACE: 50, ADaPT: 40); int >= 1
    reward_on_get: bool | None = None       # reward a `get` of the goal too; None = preset default
    layout_seed: int | None | str = "preset"  # seed of the shown lines: int = fixed, None = the
    #                                           reset seed, "preset" = preset's (agentgym: 42)
    expert_in_info: bool = False            # add info["expert_action"] (next expert command)
    render_mode: str | None = None          # "ansi": render() returns the last observation

    def __post_init__(self):
        preset = get_preset(self.preset)
        object.__setattr__(self, "max_steps", positive_int("max_steps", self.max_steps))
        if self.render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {self.render_mode!r}")
        if self.layout_seed == "preset":
            object.__setattr__(self, "layout_seed", preset.layout_seed)
        elif self.layout_seed is not None and not isinstance(self.layout_seed, int):
            raise ValueError(f"layout_seed must be an int, None or 'preset', got {self.layout_seed!r}")
        if self.reward_on_get is None:
            object.__setattr__(self, "reward_on_get", preset.reward_on_get)


@functools.lru_cache(maxsize=None)
def _line_recipes(book: RecipeBook) -> dict:
    return {r.line: r for r in reversed(book.recipes)}


@functools.lru_cache(maxsize=8192)
def _expert(book: RecipeBook, goal: str, inventory: tuple) -> tuple[str, ...]:
    return tuple(expert_plan(book, goal, dict(inventory)))


@functools.lru_cache(maxsize=8192)
def useful_commands(book: RecipeBook, goal: str, lines: tuple[str, ...]) -> tuple[str, ...]:
    """The command vocabulary of an episode (TextCraft has no native list): every shown craft
    line, plus each line with its tag ingredients replaced by the concrete members crafted by
    shown lines (the only form the engine accepts), a ``get`` per base item of the goal's tree
    at each count the tree uses and at the expert's amount, and ``inventory``. Fixed for the
    episode, so most crafts in it cannot be executed yet (see ``executable_now``)."""
    by_line = _line_recipes(book)
    shown = [by_line[line] for line in lines]
    members: dict[str, list[str]] = {}
    for r in shown:
        tag = book.item_tag.get(r.output)
        if tag is not None and r.output not in members.setdefault(tag, []):
            members[tag].append(r.output)
    out: dict[str, None] = {}
    for r in shown:
        out[r.line] = None
        choices = [[g.item] if g.tag is None else members.get(g.tag, []) for g in r.inputs]
        if any(g.tag is not None for g in r.inputs):
            for combo in itertools.islice(itertools.product(*choices), MAX_VARIANTS):
                out["craft {} {} using {}".format(r.count, item_to_text(r.output), ", ".join(
                    f"{g.count} {item_to_text(c)}" for g, c in zip(r.inputs, combo)))] = None
    gets: dict[str, None] = {}
    for r in goal_tree(book, goal).recipes:
        for g in r.inputs:
            if g.item is not None and not book.is_craftable(g.item) and g.item in book.items:
                gets[f"get {g.count} {item_to_text(g.item)}"] = None
    for action in _expert(book, goal, ()):
        if action.startswith("get "):
            gets[action] = None
    return tuple(out) + tuple(gets) + ("inventory",)


def _given(command: str) -> tuple[tuple[str, int], ...] | None:
    """(item id, count) of each ingredient a craft command names (None if one is malformed)."""
    out = []
    for part in command.split(" using ", 1)[1].split(","):
        count, _, name = part.strip().partition(" ")
        if not count.isdigit() or not name:
            return None
        out.append((PREFIX + name.replace(" ", "_"), int(count)))
    return tuple(out)


@functools.lru_cache(maxsize=8192)
def _requirements(book: RecipeBook, goal: str, lines: tuple[str, ...]) -> tuple:
    """(command, needs) per useful command: () for commands that always succeed (gets,
    ``inventory``), the (item, count) pairs a craft must find in the inventory, or None for a
    craft that never succeeds (a tag ingredient). Each craft is run once by the engine on exactly
    its ingredients, so "succeeds now" means what the engine does."""
    out = []
    for command in useful_commands(book, goal, lines):
        if not command.startswith("craft "):
            out.append((command, ()))
            continue
        needs = _given(command)
        if needs is not None:
            trial = Crafter(book, goal)
            trial.inventory = {item: max(c for i, c in needs if i == item) for item, _ in needs}
            needs = needs if trial.execute(command).succeeded else None
        out.append((command, needs))
    return tuple(out)


@functools.lru_cache(maxsize=65536)
def executable_now(book: RecipeBook, goal: str, lines: tuple[str, ...],
                   inventory: tuple[tuple[str, int], ...]) -> tuple[str, ...]:
    """The useful commands that succeed from ``inventory`` (sorted item -> count pairs): every
    ``get`` (base items can always be fetched), ``inventory``, and each craft whose ingredients
    are held. Cached: the G rollouts of a group revisit the same inventories."""
    held = dict(inventory)
    return tuple(command for command, needs in _requirements(book, goal, lines)
                 if needs is not None and all(held.get(item, 0) >= count for item, count in needs))


class TextCraftEnv(gym.Env):
    """TextCraft: craft a Minecraft item from text recipes (ADaPT's benchmark, made deterministic).

    **Description.** At reset the agent sees the goal's whole recipe tree (alternatives included)
    plus up to 10 distractor recipes, shuffled: ``Crafting commands:\\n{lines}\\n\\nGoal: craft
    {goal}.``. Base items are fetched with ``get``; everything else must be crafted with the
    exact ingredient counts of a recipe. Goals, the recipe lines of the tree and every message
    string match the reference (``textcraft`` 0.0.3) run with the spec's recipe-load order.
    The reference lists its lines in string-hash order, which changes per process; ours is the
    first-appearance order, and with that order the reference's reset text (distractors and
    shuffle included) equals ours exactly. Nothing depends on PYTHONHASHSEED or on earlier
    episodes (the reference grows its recipe lists on every reset). The distractor lines and
    their shuffle cannot match those of ADaPT's recorded runs: they followed the authors'
    file-listing order. The goals can: ``preset="adapt"``, ``split="test"`` plays ADaPT's goal
    for each seed 0-199 (``tasks.py``).

    **Action space.** ``CommandText``: one command of at most ``MAX_ACTION_LENGTH`` (1000)
    characters. Commands: ``get N item``, ``craft N item using c1 a, c2 b``, ``inventory``; anything
    else answers ``Could not execute {action}`` (``action_valid=False``, nothing changes). So does
    any str outside the space, the same rule in every bipace env: a multi-line action (a line break
    inside; surrounding whitespace does not count), whose first line the reference would run, and
    one over ``MAX_ACTION_LENGTH`` characters. A non-str action raises TypeError.

    **Observation space.** ``UnicodeText``: the reset text, then each command's reply
    (``Got 2 oak logs``, ``Crafted 4 minecraft:oak_planks``, ``Could not find ...``).

    **Rewards.** 1 when the goal is crafted (``reward_on_get``: also when it is got, AgentGym's
    rule; goals are always craftable, so such a ``get`` fails in practice), else 0.

    **Episode end.** ``terminated`` on the rewarded command; ``truncated`` after ``max_steps``
    steps (invalid ones count). A ``step`` after either raises ``EpisodeEndedError`` (a
    RuntimeError; all bipace envs do): call ``reset``.

    **Info.** Every call: ``admissible_actions`` (the commands that succeed now: the gets,
    ``inventory`` and the crafts whose ingredients are held, see ``executable_now``),
    ``useful_commands`` (the episode's fixed command vocabulary: every shown line, concrete
    variants of tag lines, the tree's gets and ``inventory``, most not executable yet; TextCraft
    has no native list, and the agents' prompts show this one), ``task_id``, ``won``, ``anchor``
    (= the observation),
    ``obs_hash``, ``goal``, ``depth``, ``step``; on step also ``action_valid`` (parsed as a
    command) and ``action_succeeded``; with ``expert_in_info`` also ``expert_action``.

    **Reset.** ``options={"task_id": id}`` picks the goal (any id of ``list_tasks``, including
    AgentGym's ``textcraft_<i>``); otherwise seed s picks ``pool[s % len(pool)]`` (no seed: a
    draw from ``np_random``); the adapt preset's test pool is ADaPT's seed -> goal list. The
    shown lines come from the preset's ``layout_seed`` or the seed.

    **Arguments.** See ``TextCraftConfig``: ``preset``, ``split``, ``depths``, ``max_steps`` (an int
    >= 1, bool not; else TypeError/ValueError, as in every bipace env), ``reward_on_get``,
    ``layout_seed``, ``expert_in_info``, ``render_mode``.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, **kwargs: Any):
        names = {f.name for f in fields(TextCraftConfig)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise TypeError(f"TextCraftEnv got unknown arguments {unknown}; valid: {sorted(names)}")
        self.config = cfg = TextCraftConfig(**kwargs)
        self.book = load_book()
        self.pool = goal_pool(cfg.preset, cfg.split, cfg.depths, self.book)
        self.render_mode = cfg.render_mode
        self.observation_space = UnicodeText()
        self.action_space = CommandText()
        self._game: Crafter | None = None

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; TextCraft takes only 'task_id'")
        if options.get("task_id") is not None:
            goal = resolve_task(options["task_id"], self.book)
        elif seed is not None:
            goal = self.pool[seed % len(self.pool)]
        else:
            goal = self.pool[int(self.np_random.integers(len(self.pool)))]
        lseed = self.config.layout_seed
        if lseed is None:
            lseed = seed if seed is not None else int(self.np_random.integers(2**31))
        self.goal, self.layout_seed = goal, lseed
        self.lines = layout(self.book, goal, lseed)
        self._useful = useful_commands(self.book, goal, self.lines)
        self._game = Crafter(self.book, goal)
        self.steps, self.won, self._ended = 0, False, False
        self._task_id = task_id_of(goal)
        self._goal_text, self._depth = item_to_text(goal), self.book.depth[goal]
        self._obs = reset_text(self.lines, goal)
        return self._obs, self._info()

    def step(self, action: str):
        if self._game is None:
            raise RuntimeError("TextCraftEnv.step called before reset()")
        if self._ended:
            raise episode_ended("TextCraftEnv")
        if not isinstance(action, str):
            raise TypeError(f"TextCraft actions are str commands such as 'get 1 oak logs', "
                            f"got {type(action).__name__}: {action!r:.80}")
        out = self._game.execute(action) if is_one_command(action) else not_executed(action)
        self.steps += 1
        hit = out.item == self.goal and (out.crafted or self.config.reward_on_get)
        self.won = self.won or hit
        truncated = (not hit) and self.steps >= self.config.max_steps
        self._ended = hit or truncated
        obs = out.text if len(out.text) <= MAX_TEXT_LENGTH else out.text[:MAX_TEXT_LENGTH]
        self._obs = obs
        info = self._info()
        info["action_valid"] = out.valid
        info["action_succeeded"] = out.succeeded
        return obs, 1.0 if hit else 0.0, hit, truncated, info

    def render(self):
        if self.render_mode == "ansi":
            return self._obs
        return None

    # ------------------------------------------------------------------ helpers
    def _info(self) -> dict:
        inventory = tuple(sorted(self._game.inventory.items()))
        info = {"admissible_actions": list(executable_now(self.book, self.goal, self.lines, inventory)),
                "useful_commands": list(self._useful), "task_id": self._task_id,
                "won": self.won, "anchor": self._obs, "obs_hash": obs_hash(self._obs),
                "goal": self._goal_text, "depth": self._depth, "step": self.steps}
        if self.config.expert_in_info:
            plan = self.expert_actions()
            info["expert_action"] = plan[0] if plan else ""
        return info

    @property
    def inventory(self) -> dict[str, int]:
        """Current inventory, item id -> count (a copy)."""
        return dict(self._game.inventory) if self._game else {}

    @property
    def state(self) -> dict:
        """What ``expert.expert_actions(state)`` needs: goal and inventory (copies)."""
        return {"goal": self.goal, "inventory": self.inventory}

    def expert_actions(self) -> list[str]:
        """Shortest command list that crafts the goal from the current inventory."""
        if self._game is None:
            raise RuntimeError("call reset() before expert_actions()")
        return list(_expert(self.book, self.goal, tuple(sorted(self._game.inventory.items()))))
