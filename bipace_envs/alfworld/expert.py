"""ALFWorld expert: alfworld's handcoded expert (seeded), Fast Downward's plan where it fails.

    expert = Expert(engine, seed=0); expert.reset(state)       # after engine.reset()
    a = expert.next_action(state); state, _, _ = engine.step(a); expert.observe(state, a)

The handcoded expert (``alfworld.agents.expert.HandCodedTWAgent``) tracks the episode from the
observations, so it must see every transition, including actions it did not suggest. It draws from the
module-level ``random`` of ``alfworld.agents.expert.handcoded_expert``; we swap in a ``random.Random``
seeded per episode for the duration of each call, which makes it reproducible without touching the
global RNG. As in alfworld's ``AlfredExpert`` wrapper, an inadmissible suggestion becomes ``look``
(after which the handcoded expert picks a random admissible command). It gives up (an exception, or not
won after ``handcoded_budget`` of its own steps) on about a third of pick_two games; from then on the expert
answers with Fast Downward's plan from the current state (replanned only when the agent leaves it).
"""
from __future__ import annotations

import contextlib
import random
import sys

from .engine import Engine


@contextlib.contextmanager
def _seeded_handcoded(rng: random.Random):
    module = sys.modules["alfworld.agents.expert.handcoded_expert"]
    original = module.random
    module.random = rng
    try:
        yield
    finally:
        module.random = original


class Expert:
    """Next-action oracle for the game loaded in ``engine``.

    Args:
        engine: the Engine the episode runs on (its game must have a traj_data.json beside it).
        seed: seeds the handcoded expert's random choices.
        mode: "handcoded" (planner fallback) or "planner" (Fast Downward only).
        handcoded_budget: how many of its own suggestions the agent may take before a handcoded expert that
            has not won is replaced by the planner (default 25, so that expert episodes fit the usual
            50-step limit). Other actions do not count: the handcoded expert tracks them, and an agent that
            acts at random half the time would otherwise send every long episode to the planner, whose
            searches after each random turn cost seconds.
        planner_timeout: seconds one Fast Downward call may take (None = no limit); past it the expert
            has no plan (``next_action`` None, ``planner_timed_out`` True) for the rest of the episode.
    """

    def __init__(self, engine: Engine, seed: int = 0, mode: str = "handcoded", handcoded_budget: int = 25,
                 planner_timeout: float | None = None):
        if planner_timeout is not None and planner_timeout <= 0:
            raise ValueError(f"planner_timeout must be > 0 seconds or None, got {planner_timeout}")
        self.planner_timeout, self.planner_timed_out = planner_timeout, False
        if mode not in ("handcoded", "planner"):
            raise ValueError(f"expert mode must be 'handcoded' or 'planner', got {mode!r}")
        self.engine, self.mode, self.budget = engine, mode, int(handcoded_budget)
        self._rng = random.Random(seed)
        self._agent = None
        self.used_planner = False
        self._next: str | None = None
        self._plan: list[str] | None = None
        self._own_steps = 0

    def reset(self, state, seed: int | None = None) -> None:
        if seed is not None:
            self._rng = random.Random(seed)
        self.used_planner = self.mode == "planner"
        self._plan, self._own_steps, self.planner_timed_out = None, 0, False
        if self.mode == "handcoded":
            from alfworld.agents.expert import HandCodedTWAgent
            self._agent = HandCodedTWAgent(max_steps=200)
            self._agent.reset(self.engine.gamefile)
            with _seeded_handcoded(self._rng):
                self._agent.observe(state["feedback"])
            self._next = "look"  # what alfworld's AlfredExpert answers before its first act()

    def _fall_back(self) -> None:
        self.used_planner = True
        self._agent, self._next, self._plan = None, None, None

    def observe(self, state, action: str) -> None:
        """Feed the transition that just happened (``state`` is the engine state after ``action``)."""
        if self._agent is not None and not self.used_planner:
            self._own_steps += action == self._next
            if self._own_steps > self.budget and not state["won"]:
                self._fall_back()
                return
            game_state = dict(state)
            game_state["facts"] = self.engine.human_facts(state)
            # Its random fallback draws from this list: keep it to what the agent is offered.
            game_state["admissible_commands"] = [c for c in state["admissible_commands"] if c != "help"]
            # Its state tracking recognises placements by "put" while this grammar says "move X to Y":
            # without this it believes it still holds the first object of a pick_two task.
            last = "put " + action[5:] if action.startswith("move ") else action
            try:
                with _seeded_handcoded(self._rng):
                    nxt = self._agent.act(game_state, 0, state["won"], last)
            except Exception:  # HandCodedAgentTimeout / HandCodedAgentFailed / its own bugs
                self._fall_back()
                return
            self._next = nxt if nxt in game_state["admissible_commands"] else "look"
        elif self._plan is not None:
            if self._plan and self._plan[0] == action:
                self._plan.pop(0)
            else:
                self._plan = None

    def next_action(self, state) -> str | None:
        """The expert's next command (None once the game is won or no plan exists)."""
        if state["won"]:
            return None
        if not self.used_planner:
            return self._next
        if self.planner_timed_out:
            return None     # do not pay the timeout again at every step of this episode
        if not self._plan:
            self._plan = self.engine.replan(self.planner_timeout)
            self.planner_timed_out = self.engine.timed_out
        return self._plan[0] if self._plan else None
