"""A small two-step crafting env with the bipace env contract, for agent tests that must not wait on
the real environments: goal ``craft 1 X using 1 Y`` is won by ``get 1 Y`` then that craft line."""
from __future__ import annotations

import gymnasium as gym

from bipace_envs.common import UnicodeText, obs_hash

ITEMS = ["oak log", "stick", "stone", "iron ingot", "gold ingot", "string", "paper", "leather",
         "glass", "sand", "coal", "feather"]


class FakeCraftEnv(gym.Env):
    """Task k: goal ITEMS[k]-block made from ITEMS[(k + 1) % n]; 12 tasks, 8 train / 4 test."""
    metadata = {"render_modes": []}

    def __init__(self, max_steps: int = 6):
        self.observation_space, self.action_space = UnicodeText(), UnicodeText()
        self.max_steps = max_steps
        self.task = 0

    def task_ids(self, split="train"):
        return list(range(8)) if split == "train" else list(range(8, 12))

    def _goal(self):
        n = len(ITEMS)
        return f"{ITEMS[self.task]} block", ITEMS[(self.task + 1) % n], ITEMS[(self.task + 5) % n]

    def _info(self, obs, **extra):
        goal, ing, other = self._goal()
        acts = sorted([f"get 1 {ing}", f"get 1 {other}", f"craft 1 {goal} using 1 {ing}", "inventory"])
        return {"admissible_actions": acts, "task_id": self.task, "won": self.won, "anchor": obs,
                "obs_hash": obs_hash(obs), **extra}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if options and "task_id" in options:
            self.task = int(options["task_id"])
        self.have, self.won, self.t = set(), False, 0
        goal, ing, _ = self._goal()
        obs = f"Crafting commands:\ncraft 1 {goal} using 1 {ing}\n\nGoal: craft {goal}."
        return obs, self._info(obs)

    def step(self, action):
        goal, ing, _ = self._goal()
        self.t += 1
        valid = True
        if action.startswith("get 1 "):
            self.have.add(action[6:])
            obs = f"Got 1 {action[6:]}"
        elif action == f"craft 1 {goal} using 1 {ing}" and ing in self.have:
            self.won, obs = True, f"Crafted 1 minecraft:{goal.replace(' ', '_')}"
        elif action == "inventory":
            obs = "Inventory: " + " ".join(f"[{h}] (1)" for h in sorted(self.have))
        else:
            valid, obs = False, f"Could not execute {action}"
        return obs, float(self.won), self.won, (not self.won) and self.t >= self.max_steps, \
            self._info(obs, action_valid=valid)

    def expert_actions(self):
        goal, ing, _ = self._goal()
        if self.won:
            return []
        return ([] if ing in self.have else [f"get 1 {ing}"]) + [f"craft 1 {goal} using 1 {ing}"]
