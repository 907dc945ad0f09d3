"""Who plays the credit benchmark's episodes, behind one interface: a model policy (``policy_play.py``) or a
scripted one (``scripted.py``). ``advantage_accuracy`` walks its stages once, whichever it is.

    player = make_player(trainer, scripted=parse_policy(spec), seed=0, workers=2, chunk=48)
    scr = player.screen(tasks, repeats, out)               # screen.json: wins per candidate goal
    saved = player.record_batch(goals, out)               # batch.pkl: the rows every estimator sees
    play = player.continuations(plan, saved, todo)       # mc_truth's play(jobs, chunk_seed), .close()
    player.checked_line(play)                             # what was checked of each continuation's start

A continuation starts from the player's own state as well as the env's: for a model, the prompt's history
(rebuilt by the collector's replay; each first prompt checked against the recorded one, token for token);
for a scripted policy, whatever its expert keeps (rebuilt by asking the expert along the replayed prefix;
each answer checked against the suggestion the batch recorded). ``expert_view`` says whether the env's
expert is a second, independent reference (QVal's view): not for a scripted policy, which is that expert
but for eps.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks.credit.scripted_policy import ScriptedPolicy


@dataclass
class ModelPlayer:
    """The trainer's model policy at its RL settings."""
    trainer: object
    seed: int
    chunk: int
    expert_view = True

    @property
    def label(self) -> str:
        return "model"

    def screen(self, tasks: list, repeats: int, out: Path) -> dict:
        from benchmarks.credit.policy_play import screen
        return screen(self.trainer, tasks, out)

    def record_batch(self, goals: list, out: Path) -> dict:
        from benchmarks.credit.policy_play import record_batch
        return record_batch(self.trainer, goals, self.seed, out)

    def continuations(self, plan, saved: dict, todo: int):
        from benchmarks.credit.policy_play import PolicyPlay, recorded_prompts
        return PolicyPlay(self.trainer, min(self.chunk, todo), self.seed, recorded_prompts(plan, saved["ro"]))

    def checked_line(self, play) -> str:
        return f"every continuation's first prompt was the recorded one ({play.checked} checked)"


@dataclass
class ScriptedPlayer:
    """The env's expert with a random admissible action with probability eps (``scripted_policy``)."""
    trainer: object
    policy: ScriptedPolicy
    seed: int
    chunk: int
    workers: int = 1
    expert_view = False

    @property
    def label(self) -> str:
        return self.policy.spec

    def screen(self, tasks: list, repeats: int, out: Path) -> dict:
        from benchmarks.credit.scripted import screen_scripted
        return screen_scripted(self.trainer, self.policy, tasks, repeats, self.seed, out)

    def record_batch(self, goals: list, out: Path) -> dict:
        from benchmarks.credit.scripted import record_scripted_batch
        return record_scripted_batch(self.trainer, self.policy, goals, self.seed, out)

    def continuations(self, plan, saved: dict, todo: int):
        from benchmarks.credit.scripted import ScriptedPlay, recorded_suggestions
        return ScriptedPlay(self.trainer, self.policy, self.seed, self.workers, chunk=self.chunk,
                            recorded=recorded_suggestions(saved))

    def checked_line(self, play) -> str:
        return (f"every replayed state's expert suggestion was the one the batch recorded ({play.checked} "
                "checked)")


def make_player(trainer, scripted: ScriptedPolicy | None, seed: int, chunk: int, workers: int = 1):
    """The scripted player for a ``scripted:EPS`` policy, else the trainer's model."""
    if scripted is not None:
        return ScriptedPlayer(trainer, scripted, seed, chunk, workers)
    return ModelPlayer(trainer, seed, chunk)
