"""Dataset rows for verl: one parquet row per env task, read by the ``bipace_env`` agent loop.

    python -m agents.verl_bridge.dataset --env alfworld --out data/verl/alfworld \\
        --env-kwargs '{"data_dir": "../shared/data/alfworld"}' --train-split train --val-split valid_unseen

Writes ``train.parquet`` and ``val.parquet``. verl's RLHFDataset needs a chat ``prompt`` column; ours
holds a one-line placeholder (the agent loop renders the real prompt from the env at every step), and
``extra_info`` names the env, its gym.make kwargs (JSON), the task id (JSON) and the reset seed.
"""
from __future__ import annotations

import argparse
import functools
import json
import os


def task_rows(env: str, tasks, env_kwargs: dict, split: str, seed: int = 0) -> list[dict]:
    return [{"data_source": f"bipace/{env}", "agent_name": "bipace_env",
             "prompt": [{"role": "user", "content": f"{env} task {task}"}],
             "extra_info": {"index": i, "split": split, "env": env, "env_kwargs": json.dumps(env_kwargs),
                            "task_id": json.dumps(task), "seed": seed + i}}
            for i, task in enumerate(tasks)]


def split_rows(env: str, env_kwargs: dict, split: str, limit: int | None = None) -> list[dict]:
    """Rows of every task of ``split`` (the first ``limit``); split-bound envs are made for that split."""
    from agents.envs import get_env_spec
    spec = get_env_spec(env)
    kwargs = dict(env_kwargs)
    if spec.split_kwarg:
        kwargs[spec.split_kwarg] = split
    tasks = spec.split_tasks(functools.partial(spec.make, **kwargs), split, limit)
    if not tasks:
        raise ValueError(f"{env} has no tasks in split {split!r}")
    return task_rows(env, tasks, kwargs, split)


def write(rows: list[dict], path: str) -> None:
    import pandas as pd
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", required=True, choices=["alfworld", "webshop", "textcraft"])
    ap.add_argument("--out", required=True, help="folder for train.parquet and val.parquet")
    ap.add_argument("--env-kwargs", default="{}", help="gym.make keyword arguments, JSON")
    ap.add_argument("--train-split", default="train")
    ap.add_argument("--val-split", default="test")
    ap.add_argument("--train-size", type=int, default=None)
    ap.add_argument("--val-size", type=int, default=None)
    a = ap.parse_args(argv)
    try:
        env_kwargs = json.loads(a.env_kwargs)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--env-kwargs must be a JSON object: {exc}")
    for name, split, size in (("train", a.train_split, a.train_size), ("val", a.val_split, a.val_size)):
        rows = split_rows(a.env, env_kwargs, split, size)
        write(rows, os.path.join(a.out, f"{name}.parquet"))
        print(f"{name}: {len(rows)} {a.env} tasks of split {split!r} -> {os.path.join(a.out, name)}.parquet")


if __name__ == "__main__":
    main()
