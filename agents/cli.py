"""``bipace-train``: RL-train a LoRA agent on a bipace env with any registered estimator.

    bipace-train --env textcraft --estimator bipace --model tiny --sft-steps 300 --iterations 20 \\
        --env-kwargs '{"preset": "agentgym", "depths": [1, 2]}' --out-dir runs/tc-bipace
    bipace-train --env textcraft --estimator gigpo --model Qwen/Qwen2.5-1.5B-Instruct \\
        --dtype bfloat16 --device cuda --gradient-checkpointing --max-new-tokens 512
    bipace-train ... --resume                       # continue from the latest checkpoint

Every option is a field of ``agents.config.TrainConfig``; ``--help`` lists them all with defaults.
Outputs in ``--out-dir``: ``adapter/`` (peft), ``checkpoints/``, ``train.csv``, ``eval.csv``, ``tb/``,
``summary.json`` (and ``warm_start/`` with ``--sft-steps``).
"""
from __future__ import annotations

import json
import os
import sys


def main(argv=None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from agents.config import build_parser, TrainConfig
    parser = build_parser(prog="bipace-train", description=__doc__.split("\n\n")[0],
                          epilog="Outputs: adapter/, checkpoints/, train.csv, eval.csv, tb/, summary.json")
    args = parser.parse_args(argv)
    cfg = TrainConfig(**vars(args))
    try:
        from agents.trainer import Trainer
        summary = Trainer(cfg).train()
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"bipace-train: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
