"""WebShop as a gymnasium env: the reference's text modes, in pure Python and offline.

    import gymnasium as gym, bipace_envs
    env = gym.make("bipace/WebShop-v0")                          # generated catalogue, verl-agent split
    env = gym.make("bipace/WebShop-v0", data_dir="~/webshop/data")  # reference files (sha256-checked)
    obs, info = env.reset(seed=0, options={"task_id": 600})      # train split: task ids 500...
    obs, r, term, trunc, info = env.step(info["admissible_actions"][0].replace("...", "shoes"))
    env.unwrapped.oracle_action()                                  # next step of the goal-buying oracle
"""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass, fields

import gymnasium as gym
import numpy as np

from ..common import CommandText, UnicodeText, episode_ended, is_one_command, obs_hash, positive_int
from .catalogue import Catalogue, catalogue_from_raw, load_catalogue
from .generate import generate_raw
from .goals import build_goals, split_range
from .search import SearchEngine
from .session import Session

# preset -> defaults it implies (explicit kwargs win)
PRESETS = {
    "verl_agent": dict(goals="synthetic", reward_mode="verl_agent", goal_sampling="uniform"),
    "original": dict(goals="human", reward_mode="score", goal_sampling="weighted"),
}
SEARCH_PLACEHOLDER = "search[...]"


def _reward_score(score: float) -> float:
    return float(score)


def _reward_verl_agent(score: float) -> float:
    return 10.0 if score == 1.0 else 0.0


REWARD_MODES = {"score": _reward_score, "verl_agent": _reward_verl_agent}


@dataclass
class WebShopConfig:
    data_dir: str | None = None       # None: generated catalogue; else a folder with the reference files
    data_files: str = "small"         # "small" (items_*_1000.json) or "full" file names in data_dir
    verify_hashes: bool = True        # check sizes/sha256 of known reference file names
    num_products: int | None = None   # keep the first N products of the raw file (reference kwarg)
    n_generated: int = 2000           # products in the generated catalogue
    catalogue_seed: int = 0           # generator seed
    price_seed: int = 0               # seed of the one-off price draw (reference: unseeded)
    goal_seed: int = 0                # seed of price_upper draws (reference: unseeded)
    preset: str = "verl_agent"        # split preset: "verl_agent" (test [0,500)) or "original"
    split: str = "train"              # "train", "test", "eval" (original only) or "all"
    goals: str | None = None          # "synthetic" or "human"; None = the preset's
    reward_mode: str | None = None    # "score" (reward = score) or "verl_agent" (10 iff score == 1)
    goal_sampling: str | None = None  # "uniform" or "weighted" (reference goal weights), without task_id
    observation_mode: str = "text"    # "text" or "text_rich"
    max_steps: int = 15               # truncation horizon, an int >= 1
    fix_option_reward: bool = False   # False keeps the reference's options quirk (see reward.py)
    title_nouns: str = "auto"         # "auto" (spaCy model if installed), "spacy" or "approx"
    pad_unmatched: bool = False       # True: list zero-score products after the hits (the stand-in
    #                                   ranker of the spec's transcripts; Lucene lists only hits)

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise ValueError(f"preset={self.preset!r}; choose one of {sorted(PRESETS)}")
        for key, value in PRESETS[self.preset].items():
            if getattr(self, key) is None:
                setattr(self, key, value)
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode={self.reward_mode!r}; choose one of {sorted(REWARD_MODES)}")
        if self.goal_sampling not in ("uniform", "weighted"):
            raise ValueError(f"goal_sampling={self.goal_sampling!r}; choose 'uniform' or 'weighted'")
        if self.observation_mode not in ("text", "text_rich"):
            raise ValueError(f"observation_mode={self.observation_mode!r}; choose 'text' or 'text_rich'")
        if self.title_nouns not in ("auto", "spacy", "approx"):
            raise ValueError(f"title_nouns={self.title_nouns!r}; choose 'auto', 'spacy' or 'approx'")
        self.max_steps = positive_int("max_steps", self.max_steps)


@functools.lru_cache(maxsize=4)
def generated_catalogue(n_products: int = 2000, seed: int = 0, price_seed: int = 0) -> Catalogue:
    raw, ins_v2, human = generate_raw(n_products, seed)
    source = f"generated(n={n_products}, seed={seed})"
    return catalogue_from_raw(raw, ins_v2, human, price_seed, source=source)


@functools.lru_cache(maxsize=4)
def _world(cfg_key: tuple):
    """(catalogue, search engine, goals), shared by every env with the same data settings."""
    (data_dir, data_files, verify, num_products, n_gen, cat_seed, price_seed, goal_seed, goals, pad) = cfg_key
    if data_dir is None:
        catalogue = generated_catalogue(n_gen, cat_seed, price_seed)
    else:
        catalogue = load_catalogue(data_dir, data_files, verify, price_seed, num_products)
    engine = SearchEngine(catalogue.products, pad_unmatched=pad)
    return catalogue, engine, build_goals(catalogue, goals, goal_seed)


class WebShopEnv(gym.Env):
    """Online shopping from a text instruction (WebShop, Yao et al. 2022), reference text modes.

    **Task**: each episode has a goal (a product, attributes, options, a price bound) written as an
    instruction; the agent searches, opens products, picks options and clicks ``buy now``.

    **Action space**: ``CommandText``, one command of at most ``MAX_ACTION_LENGTH`` (1000) characters:
    ``search[keywords]`` (any page) or ``click[x]`` with x a current clickable. Anything else is a
    no-op (``action_valid=False``): same page, reward 0. So is any str outside the space, the same
    rule in every bipace env: a multi-line action (a line break inside; surrounding whitespace does
    not count), whose first line the reference would run, and one over ``MAX_ACTION_LENGTH``
    characters. A non-str action raises TypeError.
    ``info['admissible_actions']`` lists ``click[x]`` for every current clickable (each can be
    executed as written) and, while the search bar is shown, the template ``search[...]``, which
    stands for any query; ``info['action_templates']`` names the templates in the list
    (verl-agent's prompts show the same list with ``search[<your query>]``).

    **Observation space**: ``str``: the page in ``text`` (`` [SEP] ``-joined) or ``text_rich`` mode.

    **Rewards**: 0 until ``buy now``; then the reference score in [0, 1] (``reward_mode='score'``)
    or 10 when the score is 1.0 (``'verl_agent'``). ``info['score']`` always holds the score.

    **Episode end**: terminated on ``buy now``; truncated after ``max_steps`` steps (no-ops count). A
    ``step`` after either raises ``EpisodeEndedError`` (a RuntimeError; all bipace envs do): call
    ``reset``.

    **Differences from the reference** (text modes, ``web_agent_text_env.py``):

    - ``buy now`` ends the episode (a later ``step`` raises, see above; the done page lists no
      admissible actions). The reference's ``search[...]`` works from any page, the done page
      included, so there an agent could search and buy again, scored again.
    - Search ranks with BM25 in Python (``search.py``); like pyserini, only products holding a query
      term are listed. The filter prefixes ``<r>``, ``<a>``, ``<c>``, ``<q>`` work as in the reference
      (``filters.py``), except that ``<r>`` draws from the episode's RNG and ``<a>``/a bare ``<c>``
      answer instead of raising.
    - An option value named ``attributes`` (or ``description``, ...) opens that sub page, as there;
      the Attributes page follows the site's ``attributes_page.html`` (attributes, category, query,
      product category).

    **Arguments**: see :class:`WebShopConfig` (``data_dir``, ``preset``, ``split``, ``goals``,
    ``max_steps`` (an int >= 1, bool not; else TypeError/ValueError, as in every bipace env),
    ``fix_option_reward``, ``observation_mode``, ...). ``reset(options=...)`` takes
    ``task_id`` (an index into the shuffled goals, inside the split) or ``goal`` (a goal dict).
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, render_mode=None, **kwargs):
        known = {f.name for f in fields(WebShopConfig)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown WebShopEnv argument(s) {unknown}; known: {sorted(known)}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode={render_mode!r}; WebShop supports None or 'ansi'")
        self.cfg = cfg = WebShopConfig(**kwargs)
        self.render_mode = render_mode
        key = (None if cfg.data_dir is None else str(cfg.data_dir), cfg.data_files, cfg.verify_hashes,
               cfg.num_products, cfg.n_generated, cfg.catalogue_seed, cfg.price_seed, cfg.goal_seed,
               cfg.goals, cfg.pad_unmatched)
        self.catalogue, self.engine, self.goals = _world(key)
        self.task_range = split_range(cfg.preset, cfg.split, len(self.goals))
        lo, hi = self.task_range
        if hi <= lo:
            raise ValueError(f"split {cfg.split!r} of preset {cfg.preset!r} is empty: only "
                             f"{len(self.goals)} {cfg.goals} goals in this catalogue")
        w = np.array([g["weight"] for g in self.goals[lo:hi]], dtype=np.float64)
        self._weights = w / w.sum()
        self._reward_fn = REWARD_MODES[cfg.reward_mode]
        self.observation_space = UnicodeText()
        self.action_space = CommandText()
        self.session = None

    @property
    def task_ids(self) -> range:
        return range(*self.task_range)

    # ----- gym API -----
    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        options = options or {}
        unknown = sorted(set(options) - {"task_id", "goal"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; use 'task_id' or 'goal'")
        if "goal" in options:
            goal, self.task_id = self._check_goal(options["goal"]), -1
        else:
            tid = options.get("task_id")
            if tid is None:
                lo, hi = self.task_range
                if self.cfg.goal_sampling == "weighted":
                    tid = lo + int(self.np_random.choice(hi - lo, p=self._weights))
                else:
                    tid = int(self.np_random.integers(lo, hi))
            elif not isinstance(tid, (int, np.integer)) or isinstance(tid, bool) or tid not in self.task_ids:
                raise ValueError(f"task_id={tid!r} is not in split {self.cfg.split!r} "
                                 f"[{self.task_range[0]}, {self.task_range[1]})")
            self.task_id, goal = int(tid), self.goals[int(tid)]
        self.session = Session(self.catalogue, self.engine, goal, self.cfg.fix_option_reward,
                               self.cfg.title_nouns, random.Random(int(self.np_random.integers(2**31))))
        self.steps, self.done, self.score, self._ended = 0, False, 0.0, False
        return self._obs(), self._info()

    def step(self, action):
        if self.session is None:
            raise RuntimeError("call reset() before step()")
        if self._ended:
            raise episode_ended("WebShopEnv")
        if not isinstance(action, str):
            raise TypeError(f"action must be a str such as 'search[red shoes]' or 'click[buy now]', "
                            f"got {type(action).__name__}")
        valid = is_one_command(action) and self.session.step(action)
        self.steps += 1
        reward = 0.0
        if self.session.page_name == "done":
            self.done = True
            self.score = float(self.session.reward)
            reward = self._reward_fn(self.score)
        terminated = self.done
        truncated = not terminated and self.steps >= self.cfg.max_steps
        self._ended = terminated or truncated
        info = self._info()
        info["action_valid"] = valid
        return self._obs(), reward, terminated, truncated, info

    def render(self):
        if self.render_mode == "ansi" and self.session is not None:
            return self._obs()
        return None

    # ----- helpers -----
    def _obs(self) -> str:
        return self.session.observation(self.cfg.observation_mode)

    def available_actions(self) -> dict:
        """The reference's ``get_available_actions()``: has_search_bar and clickables."""
        return self.session.available_actions()

    def admissible_actions(self) -> list:
        s = self.session
        acts = [SEARCH_PLACEHOLDER] if s.has_search_bar else []
        return acts + [f"click[{c}]" for c in s.clickables if c != "search"]

    def _info(self) -> dict:
        obs = self._obs()
        acts = [] if self.done else self.admissible_actions()
        return {"admissible_actions": acts, "action_templates": [a for a in acts if a == SEARCH_PLACEHOLDER],
                "available_actions": self.available_actions(), "task_id": self.task_id,
                "won": self.done and self.score == 1.0, "score": self.score,
                "anchor": obs, "obs_hash": obs_hash(obs), "instruction": self.session.instruction,
                # always a dict: gymnasium's vector env merges a dict key by key and breaks on None beside it
                "goal_asin": self.session.goal["asin"], "reward_details": self.session.reward_details or {}}

    def _check_goal(self, goal) -> dict:
        need = ("asin", "instruction_text", "attributes", "goal_options", "price_upper")
        if not isinstance(goal, dict) or any(k not in goal for k in need):
            raise ValueError(f"a goal must be a dict with keys {need} (query, product_category, name "
                             "default to the goal product's)")
        product = self.catalogue.by_asin.get(goal["asin"])
        if product is None:
            raise ValueError(f"goal asin {goal['asin']!r} is not in the catalogue ({self.catalogue.source})")
        return {"query": product.query, "product_category": product.product_category, "name": product.name,
                "category": product.category, "weight": 1, **goal}

    def oracle_action(self, mode: str = "goal") -> str | None:
        """The oracle's next action (``bipace_envs.webshop.oracle``): ``goal`` buys the goal product,
        ``any_perfect`` the first listed product that scores 1.0 (an expert a policy can imitate)."""
        from .oracle import oracle_action
        return oracle_action(self, mode)
