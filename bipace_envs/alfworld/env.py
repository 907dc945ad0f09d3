"""Gymnasium env over the real ALFWorld engine (TextWorld PDDL + alfworld's grammar and expert).

    import gymnasium as gym, bipace_envs
    env = gym.make("bipace/ALFWorld-v0", split="train", expert=True)          # generated games
    env = gym.make("bipace/ALFWorld-v0", data_dir="~/alfworld", split="valid_unseen")  # real games
    obs, info = env.reset(seed=3); obs, r, term, trunc, info = env.step(info["admissible_actions"][0])

Game source: ``data_dir`` (or $ALFWORLD_DATA) -> real games under ``json_2.1.1/<split>``; otherwise games
from ``bipace_envs.alfworld.generator`` (generated on first use into the cache, then reused).
"""
from __future__ import annotations

import json
import os

import gymnasium as gym

from ..common import CommandText, UnicodeText, episode_ended, is_one_command, obs_hash, positive_int
from . import generator
from .games import find_data_root, goal_conditions, list_real_games, resolve_task_types, spread_subset

GEN_POOL = {"train": 1000, "test": 25}  # default generated games per task type and split


class GameLoadError(RuntimeError):
    """A game file (or the traj_data.json beside it) that the engine cannot load; names the file."""


class ALFWorldEnv(gym.Env):
    """ALFWorld household tasks as text, played on the real TextWorld engine.

    Description: the agent is placed in a room (kitchen, living room, bedroom or bathroom) with
    numbered receptacles and must reach a goal of one of six task types (pick & place, look at an
    object under a lamp, clean / heat / cool then place, pick two and place). Texts, commands and
    dynamics are the engine's (alfworld 0.4.2 domain and grammar).

    Action space: ``CommandText``, one command of at most ``MAX_ACTION_LENGTH`` (1000) characters;
    well-formed commands are those in ``info["admissible_actions"]`` (e.g. ``go to drawer 1``,
    ``take apple 1 from countertop 2``, ``move apple 1 to fridge 1``), surrounding whitespace
    ignored; anything else gets the engine's ``Nothing happens.`` (``action_valid=False``, the game
    state unchanged). So does any str outside the space, the same rule in every bipace env: a
    multi-line action (a line break inside) and one over ``MAX_ACTION_LENGTH`` characters.
    ``help`` still works but is not listed (as in verl-agent). A non-str action raises TypeError.

    Observation space: str, the engine's raw feedback (the reset observation is the room description
    and ``Your task is to: ...``).

    Rewards: 1.0 on the step that wins the game, else 0.0 (GiGPO/BiPACE scale it to 10 in the trainer).

    Episode end: ``terminated`` when the goal holds; ``truncated`` after ``max_steps`` steps (invalid
    ones count). A ``step`` after either raises ``EpisodeEndedError`` (a RuntimeError; all bipace envs
    do): call ``reset``.

    Info (every call): ``admissible_actions``, ``task_id``, ``task_type``, ``won``, ``anchor`` (= obs),
    ``obs_hash``, ``goal_condition_success`` (ALFRED's goal-condition ratio from the PDDL facts),
    ``gamefile``; on step ``action_valid``; with the expert on, ``expert_action`` (None once won).

    Arguments:
        data_dir: folder holding ``json_2.1.1`` of real ALFWorld (default $ALFWORLD_DATA; unset -> generated).
        split: real: ``train`` / ``valid_seen`` / ``valid_unseen``; generated: ``train`` / ``test``
            (``valid_seen``/``valid_unseen`` map to ``test``'s held-out scenes when no data is given).
        task_types: names or ids 1-6 (default all six).
        max_steps: step limit (truncation), 50 as in GiGPO / BiPACE; an int >= 1 (bool not; else
            TypeError/ValueError, as in every bipace env).
        expert: put ``info["expert_action"]`` on every call (reset option ``expert`` overrides per episode).
        expert_mode: ``handcoded`` (alfworld's, seeded; Fast Downward plan where it fails) or ``planner``.
        planner_timeout: seconds one Fast Downward call may take (default None: no limit; it took up to
            387 s on one real game). Past it the expert has no action for the rest of the episode
            (``expert_action`` None, ``info["expert_timed_out"]`` True).
        games_per_task: size of the generated pool per task type (default 1000 train, 25 test); with
            real data, a fixed subset: this many games per task type, evenly spaced over the split's
            sorted games of that type (all of a type that has fewer).
        cache_dir: generated-game cache (default $BIPACE_ALFWORLD_CACHE or ~/.cache/bipace/alfworld).
        game_cache_size: parsed games kept in memory per process.

    Game choice: ``reset(seed=s)`` picks game ``np_random.integers(n_games)`` after seeding, so all G
    rollouts of a group that share a seed play the same game; ``options={"task_id": id}`` picks one.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, data_dir=None, split: str = "train", task_types=None, max_steps: int = 50,
                 expert: bool = False, expert_mode: str = "handcoded", planner_timeout: float | None = None,
                 games_per_task: int | None = None,
                 cache_dir=None, game_cache_size: int = 32, render_mode: str | None = None):
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode, self.max_steps = render_mode, positive_int("max_steps", max_steps)
        if expert_mode not in ("handcoded", "planner"):
            raise ValueError(f"expert_mode must be 'handcoded' or 'planner', got {expert_mode!r}")
        if planner_timeout is not None and not float(planner_timeout) > 0:
            raise ValueError(f"planner_timeout must be > 0 seconds or None, got {planner_timeout}")
        self.expert_default, self.expert_mode = bool(expert), expert_mode
        self.planner_timeout = None if planner_timeout is None else float(planner_timeout)
        self.task_types = resolve_task_types(task_types)
        self.cache_dir, self.game_cache_size = cache_dir, game_cache_size
        root = find_data_root(data_dir)
        if root is not None:
            self.source = "real"
            self._real = list_real_games(root, split, self.task_types)
            if games_per_task is not None:
                self._real = spread_subset(self._real, int(games_per_task))
            self.task_ids = sorted(self._real)
        else:
            self.source = "generated"
            split = {"valid_seen": "test", "valid_unseen": "test"}.get(split, split)
            if split not in generator.GEN_SPLITS:
                raise ValueError(f"unknown split {split!r} for generated games; use one of "
                                 f"{generator.GEN_SPLITS} (or give data_dir for real ALFWorld splits)")
            n = int(games_per_task or GEN_POOL[split])
            if n < 1:
                raise ValueError(f"games_per_task must be >= 1, got {n}")
            self.task_ids = [f"gen/{split}/{t}/{i:05d}" for t in self.task_types for i in range(n)]
        self.split = split
        self._task_set = set(self.task_ids)
        self.observation_space = UnicodeText()
        self.action_space = CommandText()
        self._engine = None  # created lazily: it is per process (AsyncVectorEnv workers build their own)
        self._expert = None
        self._state = None
        self._meta: dict[str, dict] = {}

    # ---- games -------------------------------------------------------------------------------
    def gamefile(self, task_id: str) -> str:
        """Game file of ``task_id`` (generated ones are generated and checked on first use)."""
        if task_id not in self._task_set:
            raise ValueError(f"unknown ALFWorld task_id {task_id!r} for split {self.split!r} "
                             f"({len(self.task_ids)} games, e.g. {self.task_ids[0]!r})")
        if self.source == "real":
            return self._real[task_id]
        _, split, task_type, index = task_id.split("/")
        return generator.ensure_game(split, task_type, int(index), self.cache_dir, self._get_engine())

    def _get_engine(self):
        if self._engine is None:
            from .engine import Engine
            self._engine = Engine(cache_size=self.game_cache_size)
        return self._engine

    def _task_meta(self, task_id: str, gamefile: str) -> dict:
        if task_id not in self._meta:
            with open(os.path.join(os.path.dirname(gamefile), "traj_data.json")) as f:
                traj = json.load(f)
            self._meta[task_id] = {**traj["pddl_params"], "task_type": traj["task_type"]}
        return self._meta[task_id]

    # ---- gym API -----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id", "expert"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; known: ['expert', 'task_id']")
        task_id = options.get("task_id")
        if task_id is None:
            task_id = self.task_ids[int(self.np_random.integers(len(self.task_ids)))]
        gamefile = self.gamefile(task_id)
        engine = self._get_engine()
        try:
            engine.load(gamefile)
            self._state = engine.reset()
            params = self._task_meta(task_id, gamefile)
        except Exception as exc:     # a corrupt or foreign file: say which one, whatever the parser raised
            self._state = None
            raise GameLoadError(f"ALFWorld game {gamefile} (task {task_id!r}) failed to load: "
                                f"{type(exc).__name__}: {exc}. Replace or remove that trial folder "
                                "(alfworld-download restores the originals)") from exc
        self.task_id, self._params = task_id, params
        self._steps, self._done = 0, False
        self._gc = (None, (0, 1))
        self._expert = None
        # Drawn whether or not the expert is on, so switching it does not change later game choices.
        expert_seed = int(self.np_random.integers(2**31))
        if options.get("expert", self.expert_default):
            from .expert import Expert
            self._expert = Expert(engine, seed=expert_seed, mode=self.expert_mode,
                                  planner_timeout=self.planner_timeout)
            self._expert.reset(self._state)
        obs = self._state.feedback
        return obs, self._info(obs)

    def step(self, action):
        if self._state is None:
            raise RuntimeError("ALFWorldEnv.step() called before reset()")
        if self._done:
            raise episode_ended("ALFWorldEnv")
        if not isinstance(action, str):
            raise TypeError(f"ALFWorld actions are str commands, got {type(action).__name__}: {action!r}")
        # '' is no command: the engine answers "Nothing happens." and leaves the game as it was
        command = action.strip() if is_one_command(action) else ""
        valid = command in self._state["_valid_commands"]
        self._state, _, _ = self._engine.step(command)
        if self._expert is not None:
            self._expert.observe(self._state, command)
        self._steps += 1
        won = bool(self._state["won"])
        truncated = not won and self._steps >= self.max_steps
        self._done = won or truncated
        obs = self._state.feedback
        info = self._info(obs)
        info["action_valid"] = valid
        return obs, float(won), won, truncated, info

    def _info(self, obs: str) -> dict:
        s = self._state
        if self._gc[0] is not s["_facts"]:  # an unknown command leaves the very same facts list
            self._gc = (s["_facts"], goal_conditions(s["_facts"], self._params))
        done_c, total_c = self._gc[1]
        info = {"admissible_actions": [a for a in s["admissible_commands"] if a != "help"],
                "task_id": self.task_id, "task_type": self._params["task_type"], "won": bool(s["won"]),
                "anchor": obs, "obs_hash": obs_hash(obs), "goal_condition_success": done_c / total_c,
                "gamefile": self._engine.gamefile}
        if self._expert is not None:
            info["expert_action"] = self._expert.next_action(s)
            info["expert_used_planner"] = self._expert.used_planner
            info["expert_timed_out"] = self._expert.planner_timed_out
        return info

    def expert_action(self) -> str | None:
        """Expert's next command for the running episode (needs ``expert=True`` or the reset option)."""
        if self._expert is None:
            raise RuntimeError("the expert is off: construct with expert=True or "
                               "reset(options={'expert': True})")
        return self._expert.next_action(self._state)

    def render(self):
        if self.render_mode == "ansi" and self._state is not None:
            return self._state.feedback
        return None

    def close(self):
        self._engine = self._expert = self._state = None
