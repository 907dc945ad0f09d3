"""Held-out evaluation of a policy: every task played with fixed env and decoding seeds, so every
estimator and iteration is scored on the same episodes, and kept chunk by chunk in a JSONL file, so an
evaluation that a stopped session cut short continues with the chunks it kept.

    from agents.evaluation import evaluate_tasks
    result = evaluate_tasks(trainer.collector("eval"), tasks, repeats=1, chunks_file=Path("eval.jsonl"))
    result.metrics["eval_success"], result.by_task, result.episodes

``Trainer.evaluate`` is the usual caller.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch


def kept_chunks(path) -> list[dict]:
    """The finished chunks of an evaluation's JSONL file. A last line cut mid-write (the process was
    stopped while appending) is dropped and the file rewritten without it, so that chunk is played again
    and the next append starts on a line of its own; a bad line anywhere else is an error."""
    path = Path(path)
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    records = []
    for k, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if k < len(lines) - 1:
                raise ValueError(f"{path}: line {k + 1} is not a chunk record; delete the file to play the "
                                 "whole evaluation again") from None
            print(f"note: {path}: its last chunk was cut mid-write; it is played again")
            path.write_text("".join(line + "\n" for line in lines[:-1]))
    return records


def inadmissible_answers(ro, n_envs: int, keep: int = 3) -> dict:
    """How many of the first ``n_envs`` envs' answers the env refused (``info['action_valid']`` False:
    they named no admissible action) and a few of them as text, so an evaluation says what the policy
    wrote instead of silently scoring a no-op."""
    rows = np.flatnonzero(ro.env_index < n_envs)
    bad = [r for r in rows if not ro.admissible[r]]
    return {"answers": len(rows), "inadmissible": len(bad),
            "samples": [{"response": ro.responses[r], "action": ro.actions[r]} for r in bad[:keep]]}


def episode_actions(ro, n_envs: int) -> dict:
    """The first ``n_envs`` episodes' actions in step order and, per episode, the steps whose answer the
    env refused: what each episode did, so a change of score between two policies can be read off the
    evaluations (which product was bought, where an agent went) without playing them again."""
    actions, refused = [], []
    for k in range(n_envs):
        rows = np.flatnonzero(ro.env_index == k)          # a rollout appends an env's rows in step order
        actions.append([ro.actions[r] for r in rows])
        refused.append([int(j) for j, r in enumerate(rows) if not ro.admissible[r]])
    return {"actions": actions, "refused_steps": refused}


@dataclass
class Evaluation:
    """What one evaluation measured."""
    metrics: dict = field(default_factory=dict)
    """eval_success, eval_length, eval_n, eval_score (mean env score) and eval_inadmissible (share of
    answers the env refused); empty when there were no tasks."""
    by_task: dict = field(default_factory=dict)
    """str(task) -> [episodes won, episodes]: which goals a change of policy changed."""
    episodes: dict = field(default_factory=dict)
    """The episodes in order: tasks, won, scores, lengths, each episode's actions and refused steps
    (``episode_actions``; None for chunks kept before they were recorded), and up to 20 refused answers
    with their text."""


def chunk_width(n_episodes: int, eval_batch: int) -> int:
    """Envs an evaluation of ``n_episodes`` steps together: as few chunks as ``eval_batch`` allows, made
    equal, so the last chunk pads as few envs as can be (60 episodes at eval_batch 40 run as 2 x 30, not
    40 + 20 of which 20 padding episodes are played and discarded)."""
    if eval_batch < 1:
        raise ValueError(f"eval_batch must be >= 1, got {eval_batch}")
    n_episodes = max(1, n_episodes)
    chunks = -(-n_episodes // eval_batch)
    return -(-n_episodes // chunks)


def play_chunk(collector, chunk: list, start: int) -> dict:
    """One chunk's record: its episodes padded to the collector's width, env seeds 1000+start+k and
    decoding seed 10007+start (a chunk's seeds depend on where it starts, never on what ran before)."""
    padded, t0 = chunk + [chunk[0]] * (collector.n - len(chunk)), time.perf_counter()
    torch.manual_seed(10_007 + start)
    ro = collector.collect(padded, [1000 + start + k for k in range(collector.n)], list(range(collector.n)))
    return {"start": start, "tasks": [str(t) for t in chunk], "won": ro.success[:len(chunk)].tolist(),
            "lengths": ro.episode_length[:len(chunk)].tolist(), "scores": ro.score[:len(chunk)].tolist(),
            **inadmissible_answers(ro, len(chunk)), **episode_actions(ro, len(chunk)),
            "s": time.perf_counter() - t0}


@torch.no_grad()
def evaluate_tasks(collector, tasks: list, repeats: int = 1, chunks_file: Path | None = None) -> Evaluation:
    """Play each of ``tasks`` ``repeats`` times with ``collector`` (its model in eval mode) in chunks of
    ``collector.n`` episodes.

    ``chunks_file``: a JSONL file that keeps each finished chunk; a later call with the same file plays
    only the chunks missing there and scores exactly what an uninterrupted call would. Use one file per
    model and settings: the kept chunks are checked against the tasks they played, not the model."""
    if repeats < 1:
        raise ValueError(f"eval_repeats must be >= 1, got {repeats}")
    if not tasks:
        return Evaluation()
    # a task's repeats side by side (each with its own env and decoding seed): they share a prompt prefix
    tasks = [t for t in tasks for _ in range(repeats)]
    if len(tasks) % collector.n:
        print(f"note: evaluation of {len(tasks)} episodes in chunks of {collector.n}: the last chunk pads "
              f"{collector.n - len(tasks) % collector.n} of its {collector.n} envs with episodes that are "
              f"discarded (an eval_batch that divides {len(tasks)} wastes none; changing it changes the "
              "chunks' seeds)")
    kept = {r["start"]: r for r in kept_chunks(chunks_file)} if chunks_file is not None else {}
    won, lengths, scores, answers, inadmissible, samples = [], [], [], 0, 0, []
    actions, refused = [], []
    for start in range(0, len(tasks), collector.n):
        chunk = tasks[start:start + collector.n]
        if start in kept:
            if kept[start]["tasks"] != [str(t) for t in chunk]:
                raise ValueError(f"{chunks_file} holds chunks of another evaluation (its chunk at "
                                 f"{start} played other tasks); delete it or pass another file")
            row = kept[start]
        else:
            row = play_chunk(collector, chunk, start)
            if chunks_file is not None:
                with open(chunks_file, "a") as f:
                    f.write(json.dumps(row) + "\n")
        won += row["won"]
        lengths += row["lengths"]
        scores += row.get("scores", row["won"])         # chunks kept before scores were recorded
        answers += row.get("answers", 0)
        inadmissible += row.get("inadmissible", 0)
        samples += row.get("samples", [])
        # chunks kept before actions were recorded: None, not an empty episode
        actions += row.get("actions", [None] * len(row["won"]))
        refused += row.get("refused_steps", [None] * len(row["won"]))
    by_task: dict[str, list] = {}
    for task, w in zip(tasks, won):
        tally = by_task.setdefault(str(task), [0, 0])
        tally[0], tally[1] = tally[0] + int(w), tally[1] + 1
    episodes = {"tasks": [str(t) for t in tasks], "won": [bool(w) for w in won],
                "scores": [float(x) for x in scores], "lengths": [int(x) for x in lengths],
                "actions": actions, "refused_steps": refused, "inadmissible_samples": samples[:20]}
    metrics = {"eval_success": float(np.mean(won)), "eval_length": float(np.mean(lengths)),
               "eval_n": len(won), "eval_score": float(np.mean(scores)),
               "eval_inadmissible": inadmissible / max(answers, 1)}
    return Evaluation(metrics, by_task, episodes)
