"""The real policy's side of the credit benchmark: the recorded batch every estimator sees, and
Monte-Carlo continuations from its replayed states, each with its own random stream.

    scr = screen(trainer, candidates, out)                       # screen.json: wins per candidate goal
    goals, note = choose_goals(scr["by_task"], candidates, b, seed)
    saved = record_batch(trainer, goals, seed, out)             # batch.pkl: rollout, tasks, seeds, goals
    play = PolicyPlay(trainer, chunk, seed, recorded_prompts(plan, saved["ro"]))
    run_continuations(plan, k, play, store, play.chunk, gamma)   # benchmarks.credit.mc_truth

The batch and the continuations draw from different streams (``stream_seed``): with one seed for both,
the first chunk of continuations would repeat the batch's first draws. Every continuation's first prompt
is checked, during the run, against the recorded prompt of the state it starts from, token for token
(``PromptMismatch``): a continuation that saw another prompt would measure another state's value.
"""
from __future__ import annotations

import dataclasses
import json
import pickle
import time
import zlib
from pathlib import Path

import numpy as np


class PromptMismatch(RuntimeError):
    """A continuation's first prompt differs from the recorded prompt of its start state."""


def stream_seed(seed: int, stream: str, *more: int) -> int:
    """A torch seed for one named random stream of a run (``"batch"``, ``"continuations"``, ...), distinct
    across streams and their sub-indices for the same run seed."""
    entropy = [int(seed), zlib.crc32(stream.encode()), *(int(m) for m in more)]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0] % (2**63 - 1))


def batch_layout(goals: list, group_size: int, seed: int) -> tuple[list, list, np.ndarray]:
    """(task, env seed, group) per episode of a batch: each goal G times, one env seed per goal drawn from
    ``seed``, so a model policy's and a scripted policy's batches of the same goals play the same games."""
    rng = np.random.default_rng([seed, 1])
    tasks = [g for g in goals for _ in range(group_size)]
    seeds = np.repeat(rng.integers(0, 2**31 - 1, len(goals)), group_size).tolist()
    return tasks, seeds, np.repeat(np.arange(len(goals)), group_size)


def record_batch(trainer, goals: list, seed: int, out: Path) -> dict:
    """The batch every estimator sees (kept in ``out/batch.pkl``): B goals x G episodes, one env seed per
    goal, decoded from the ``"batch"`` stream of ``seed``."""
    path = out / "batch.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes())
    import torch
    from agents.ppo import row_logp_sums
    from estimators import REGISTRY
    c = trainer.cfg
    tasks, seeds, groups = batch_layout(goals, c.group_size, seed)
    torch.manual_seed(stream_seed(seed, "batch"))
    trainer.model.eval()
    t0 = time.perf_counter()
    ro = trainer.collector("train").collect(tasks, seeds, groups)
    batch = ro.batch.with_fields(**row_logp_sums(ro.response_ids, ro.old_logprobs))
    stats = {"rollout_s": time.perf_counter() - t0}
    if any("hind_logp_sum" in REGISTRY[n].needs for n in REGISTRY):
        from agents.hindsight import score_hindsight, settings_for
        sums, hstats = score_hindsight(trainer.model, trainer.tok, ro, settings_for(c))
        batch = batch.with_fields(hind_logp_sum=sums)
        stats["hindsight_s"] = hstats.get("seconds", 0.0)
    ro.batch = batch
    saved = {"ro": ro, "tasks": tasks, "seeds": seeds, "goals": goals, "stats": stats}
    path.write_bytes(pickle.dumps(saved))
    return saved


def choose_goals(by_task: dict, tasks: list, b: int, seed: int) -> tuple[list, str]:
    """B goals: mixed outcomes in the screen first, then always-won ones; a message when that is not B."""
    wins = {str(t): by_task.get(str(t), [0, 0]) for t in tasks}
    mixed = [t for t in tasks if 0 < wins[str(t)][0] < wins[str(t)][1]]
    always = [t for t in tasks if wins[str(t)][1] and wins[str(t)][0] == wins[str(t)][1]]
    if not mixed and not always:
        raise SystemExit("the policy never won any candidate goal in the screen: every advantage of every "
                         "estimator would be zero (sparse win reward) and the MC truth too. Use a stronger "
                         "policy (--policy), easier goals, or more --screen-repeats")
    rng = np.random.default_rng(seed)
    chosen = list(rng.permutation(np.array(mixed, dtype=object)))[:b]
    chosen += list(rng.permutation(np.array(always, dtype=object)))[:b - len(chosen)]
    note = (f"{len(mixed)} of {len(tasks)} candidate goals had mixed outcomes in the screen and "
            f"{len(always)} were always won; the batch takes {len(chosen)}")
    return sorted(chosen, key=str), note


def screen(trainer, tasks, out: Path) -> dict:
    path = out / "screen.json"
    if not path.exists():
        trainer.eval_tasks = list(tasks)
        ev = trainer.evaluate(out / "screen.chunks.jsonl")
        path.write_text(json.dumps({"eval_success": ev["eval_success"], "by_task": trainer.eval_by_task}))
        (out / "screen.chunks.jsonl").unlink(missing_ok=True)
    return json.loads(path.read_text())


def recorded_prompts(plan, ro) -> dict:
    """(task, seed, action prefix) of every start state -> the prompt token ids the recorded episode had
    there (episodes sharing a prefix share its prompt)."""
    out = {}
    for e, t in plan.starts:
        ep = plan.episodes[e]
        out[(str(ep.task), int(ep.seed), tuple(ep.actions[:t]))] = ro.prompt_ids[ep.rows[t]]
    return out


class PolicyPlay:
    """Continuations from replayed states with the policy: ``chunk`` envs of one collector at a time, each
    chunk decoded from the ``"continuations"`` stream of ``seed``; with ``expected`` (``recorded_prompts``)
    every continuation's first prompt must be the recorded one."""

    def __init__(self, trainer, chunk: int, seed: int, expected: dict | None = None):
        from agents.prompts import make_prompter
        from agents.rollout import RolloutCollector
        c, self.chunk, self.seed, self.expected = trainer.cfg, chunk, seed, expected
        base = trainer.collector("train").s
        settings = dataclasses.replace(base, capture_hidden=False, logprobs=False)
        self.collector = RolloutCollector(trainer.model, trainer.tok, trainer.make_env, chunk,
                                          make_prompter(c.env, trainer.prompt_settings), settings,
                                          trainer.spec.reward_map, fallback_chars=trainer.spec.fallback_chars)
        self.checked = 0

    def __call__(self, jobs, chunk_seed):
        import torch
        n = len(jobs)
        jobs = jobs + [jobs[-1]] * (self.chunk - n)          # the collector plays a fixed number of envs
        torch.manual_seed(stream_seed(self.seed, "continuations", chunk_seed))
        ro = self.collector.collect([j[0] for j in jobs], [j[1] for j in jobs], list(range(self.chunk)),
                                    replays=[j[2] for j in jobs])
        out = []
        for i in range(n):
            rows = np.flatnonzero(ro.env_index == i)
            rows = rows[np.argsort(ro.batch.step_idx[rows], kind="stable")]
            if self.expected is not None:
                self._check_first_prompt(jobs[i], ro.prompt_ids[rows[0]])
            out.append((ro.batch.reward[rows].tolist(), ro.batch.action_valid[rows].tolist(),
                        bool(ro.success[i])))
        return out

    def _check_first_prompt(self, job, prompt) -> None:
        task, seed, replay, t = job
        want = self.expected.get((str(task), int(seed), tuple(replay.actions)))
        if want is None or len(want) != len(prompt) or not bool((want == prompt).all()):
            recorded = "none recorded" if want is None else f"{len(want)} recorded"
            raise PromptMismatch(
                f"the continuation from step {t} of goal {task} (env seed {seed}) saw a first prompt of "
                f"{len(prompt)} tokens that differs from the recorded one ({recorded}): the replay did not "
                "rebuild the prompt's history, so its value would be another state's. Check that the "
                "prompter and the env's replay are deterministic (tests/agents/test_replay.py)")
        self.checked += 1

    def close(self):
        self.collector.close()
