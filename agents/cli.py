"""``bipace-train``: RL-train a LoRA agent on a bipace env with any registered estimator.

    bipace-train --preset smoke --out-dir runs/smoke            # seconds: checks an installation
    bipace-train --preset textcraft-table --out-dir runs/tc     # the results table's TextCraft setting
    bipace-train --preset textcraft-table --estimator grpo --set lr=1e-3   # flags and --set override it
    bipace-train --preset qwen1.5b-alfworld --estimator gigpo   # the paper's single-GPU setting
    bipace-train ... --resume                                   # continue from the newest checkpoint

Presets live in ``agents/presets.py`` (``--help`` lists them); without ``--preset`` the settings are
``agents.config.TrainConfig``'s defaults. Every field is an option (``--help`` lists them all); ``--set
FIELD=VALUE`` takes any field too. A run locks ``--out-dir`` while it writes there (a second run into it
stops at once, naming the first), and refuses a folder that holds anything unless ``--resume`` (continue
the run there, with its settings) or ``--overwrite`` (delete it and start over). Outputs in
``--out-dir``: ``adapter/`` (peft), ``checkpoints/``, ``train.csv``, ``eval.csv``, ``eval_by_task.jsonl``,
``tb/``, ``config.json`` (the preset's name and every field), ``summary.json`` (and ``warm_start/`` with
``--sft-steps``).
"""
from __future__ import annotations

import json
import os
import sys


def main(argv=None) -> int:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from agents.presets import cli_parser, config_from_args
    parser = cli_parser(prog="bipace-train", description=__doc__.split("\n\n")[0],
                        epilog="Outputs: adapter/, checkpoints/, train.csv, eval.csv, tb/, config.json, "
                               "summary.json")
    try:
        cfg = config_from_args(argv, parser)
    except ValueError as exc:
        print(f"bipace-train: error: {exc}", file=sys.stderr)
        return 2
    try:
        from agents.trainer import Trainer
        summary = Trainer(cfg, own_folder=True).train()   # a used folder needs --resume or --overwrite
    except (ValueError, FileNotFoundError, NotImplementedError) as exc:
        print(f"bipace-train: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
