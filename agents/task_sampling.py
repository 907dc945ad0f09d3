"""Which training tasks an RL iteration plays: the trainer's ``task_sampling`` option.

    from agents.task_sampling import TaskTally, pick_tasks
    tally = TaskTally(n_tasks=16)
    pick = pick_tasks("mixed", rng, tally, batch_tasks=8)     # indices into the trainer's train_tasks
    tally.add(np.repeat(pick, G), success_of_each_episode)

A group whose G episodes all win (or all lose) has no episode-level signal: GRPO gives it zero advantage
and the update skips it. ``uniform`` draws tasks without regard to that. ``mixed`` draws them in
proportion to how likely a group of the task is to mix wins and losses, judged from the task's earlier
episodes in this run: weight 4 p (1 - p), with p = (wins + 1) / (episodes + 2) (Laplace's rule, so a task
not played yet weighs 1, the most, and one won every time keeps a small weight that shrinks as it keeps
being won). The same idea as DAPO's dynamic sampling, without its extra rollouts, and as prioritised level
replay's curricula; the draw is still random, so no task is ever excluded.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class TaskTally:
    """Training episodes played and won per task index over a run (kept in checkpoints)."""
    n_tasks: int
    wins: np.ndarray = field(default=None)
    episodes: np.ndarray = field(default=None)

    def __post_init__(self):
        self.wins = np.zeros(self.n_tasks) if self.wins is None else np.asarray(self.wins, dtype=np.float64)
        self.episodes = np.zeros(self.n_tasks) if self.episodes is None else \
            np.asarray(self.episodes, dtype=np.float64)
        if self.wins.shape != (self.n_tasks,) or self.episodes.shape != (self.n_tasks,):
            raise ValueError(f"a task tally of {self.n_tasks} tasks got arrays of shape {self.wins.shape} "
                             f"and {self.episodes.shape}: was the checkpoint made with other training tasks?")

    def add(self, task_index: np.ndarray, success: np.ndarray) -> None:
        """Counts one episode per entry: its task's index and whether it was won."""
        np.add.at(self.episodes, np.asarray(task_index, dtype=np.int64), 1.0)
        np.add.at(self.wins, np.asarray(task_index, dtype=np.int64), np.asarray(success, dtype=np.float64))

    def state(self) -> dict:
        return {"wins": self.wins.tolist(), "episodes": self.episodes.tolist()}


def mixed_outcome_weights(tally: TaskTally) -> np.ndarray:
    """4 p (1 - p) per task, p the Laplace estimate of its win rate: 1 for an unplayed task."""
    p = (tally.wins + 1.0) / (tally.episodes + 2.0)
    return 4.0 * p * (1.0 - p)


def _uniform(rng, tally: TaskTally, batch_tasks: int) -> np.ndarray:
    # the draw of every run made before task_sampling existed: keep it bit for bit
    return rng.choice(tally.n_tasks, batch_tasks, replace=tally.n_tasks < batch_tasks)


def _mixed(rng, tally: TaskTally, batch_tasks: int) -> np.ndarray:
    w = mixed_outcome_weights(tally)
    return rng.choice(tally.n_tasks, batch_tasks, replace=tally.n_tasks < batch_tasks, p=w / w.sum())


TASK_SAMPLERS = {"uniform": _uniform, "mixed": _mixed}


def pick_tasks(how: str, rng, tally: TaskTally, batch_tasks: int) -> np.ndarray:
    """``batch_tasks`` task indices (distinct when there are enough tasks) drawn the ``how`` way."""
    if how not in TASK_SAMPLERS:
        raise ValueError(f"task_sampling must be one of {' | '.join(TASK_SAMPLERS)}, got {how!r}")
    return TASK_SAMPLERS[how](rng, tally, batch_tasks)
