"""The chunk file of a resumable evaluation (``Trainer.evaluate(chunks_file)``): one JSON line per finished
chunk of episodes, appended as each ends, so an evaluation that a stopped session cut short continues
with the chunks it kept.
"""
from __future__ import annotations

import json
from pathlib import Path


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
