"""Named points where a crash-consistency check may kill a run (``benchmarks/learning/kill_resume.py``).

    BIPACE_KILL_AT=checkpoint:2 bipace-train ...      # SIGKILLs itself the 2nd time it reaches "checkpoint"
    BIPACE_CRASH_TRACE=/tmp/trace bipace-train ...    # appends each point's name to /tmp/trace

The points sit where a kill would be worst: inside the SFT warm start, between a rollout and its update,
after an optimizer step, between an evaluation and its logs, between one log and the next, half-way
through a checkpoint, and between the final adapter and the summary. Without either variable a point
costs two environment lookups.
"""
from __future__ import annotations

import os
import signal

PHASES = ("sft_step", "warm_start_save", "rollout", "update", "evaluation", "train_log", "eval_log",
          "checkpoint", "checkpoint_latest", "adapter")
_reached: dict[str, int] = {}


def crash_point(phase: str) -> None:
    trace = os.environ.get("BIPACE_CRASH_TRACE")
    if trace:
        with open(trace, "a") as f:
            f.write(phase + "\n")
    target = os.environ.get("BIPACE_KILL_AT")
    if target:
        name, _, nth = target.partition(":")
        if name == phase:
            _reached[phase] = _reached.get(phase, 0) + 1
            if _reached[phase] == int(nth or 1):
                os.kill(os.getpid(), signal.SIGKILL)
