"""The settings a ``benchmarks.learning.train_table`` folder was made with, in ``table_settings.json``.

    from benchmarks.learning.table_settings import load, shaping_diff
    stored = load(Path("runs/table"))    # {"preset", "config": TrainConfig fields, "table": table options}

A table continues where it stopped, so its kept runs fix its settings. The file holds the full
``TrainConfig`` the table started from (a preset of ``agents/presets.py`` plus ``--set``) and the options
that belong to the table alone (warm-start seed, screen, RL goal choice). Folders made before presets
(until 2026-12-04) stored ``train_table``'s own flags; ``from_legacy`` maps them onto this form, a flag
missing from such a file read as the default that table ran with, as before.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

FORMAT = 2
# the options of the table itself (not TrainConfig fields); all shape its runs
TABLE_OPTIONS = ("warm_start_seed", "screen_repeats", "min_ingredients", "also_simpler", "train_goals")
# TrainConfig fields that change how a table runs, not what it measures
NOT_SHAPING = ("preset_name", "out_dir", "estimator", "seed", "resume", "threads", "progress", "tensorboard",
               "sft_probe", "vector_mode", "ray_address", "ray_workers")
# settings that shape the RL runs and nothing before them (warm start, its evaluation, the screen): a
# table's first RL run may take other values than an earlier call that stopped before any run
RL_ONLY = ("train_goals", "min_ingredients", "also_simpler", "lora_layers", "iterations", "batch_tasks",
           "group_size", "lr", "kl_coef", "invalid_penalty", "skip_zero_adv", "mini_batch_rows",
           "micro_batch_rows", "ppo_epochs", "drift_rows", "rl_rename", "eval_every", "task_sampling",
           "hidden_layer", "mode", "dynamic_sampling", "dynamic_sampling_rounds", "eps", "gamma",
           "step_weight", "pace", "key_kind", "estimator_options", "weight_decay", "grad_clip", "clip_ratio",
           "clip_low", "clip_high", "ratio_level", "loss_agg", "dual_clip", "entropy_coef", "minibatch_unit",
           "old_logprobs", "checkpoint_every", "eval_before")

# --- folders made before presets --------------------------------------------------------------------
# train_table's flag defaults at commit 7e122c6, the last before presets
LEGACY_FLAG_DEFAULTS = {
    "model": "smollm2-135m", "warm_start_seed": 0, "sft_steps": 120, "sft_lr": 1e-3, "sft_batch": 8,
    "sft_passes": 1, "sft_explore": 0.1, "sft_rename": 0.0, "rl_rename": 0.0, "lora_rank": 16,
    "rl_lora_layers": None, "iterations": 10, "batch_tasks": 8, "group_size": 6, "lr": 1.5e-3, "kl_coef": 0.0,
    "invalid_penalty": 0.0, "skip_zero_adv": True, "mini_batch_rows": 64, "ppo_epochs": 1, "drift_rows": 32,
    "max_steps": 6, "max_new_tokens": 32, "history_length": 6, "screen_repeats": 1, "min_ingredients": None,
    "also_simpler": None, "train_goals": None, "task_sampling": "uniform", "dynamic_sampling": False,
    "mode": None, "hidden_layer": None, "eval_every": 0, "depths": [1], "eval_tasks": 0, "eval_repeats": 12,
    "temperature": 1.0, "eval_temperature": 0.4, "show_admissible": False}
# a flag missing from a legacy file was added after that table started, which ran with the default of
# the time: these are the defaults before the README's depth-1 setting became the default (2026-12-03)
EARLIER_DEFAULTS = {"depths": [1, 2], "eval_repeats": 4, "max_steps": 8, "history_length": 8,
                    "kl_coef": 0.01, "sft_lr": 2e-4, "min_ingredients": 1, "also_simpler": 0,
                    "batch_tasks": 4, "group_size": 8, "lr": 5e-4, "rl_lora_layers": 0, "iterations": 10,
                    "hidden_layer": 0}      # before --hidden-layer: BiPACE's scaled depth


def half_blocks(folder: str | Path) -> int:
    """Half the decoder blocks of a model folder (a table's RL LoRA before presets: the top half)."""
    return max(1, json.loads((Path(folder) / "config.json").read_text())["num_hidden_layers"] // 2)


def table_defaults(table: dict) -> dict:
    """The table options with their automatic values filled in: RL samples the screen's 2+-ingredient
    goals and 8 simpler ones unless ``train_goals`` gives the goals or there is no screen."""
    table = dict(table)
    if table.get("min_ingredients") is None:
        screened = table.get("train_goals") is None and table["screen_repeats"] >= 1
        table["min_ingredients"] = 2 if screened else 1
    if table.get("also_simpler") is None:
        table["also_simpler"] = 8 if table["min_ingredients"] >= 2 else 0
    return table


def legacy_eval_width(eval_tasks: int, depths) -> int:
    """The envs a pre-preset table's evaluations stepped together: min(77, its held-out goals), whatever
    the repeats (evaluations now split the episodes into equal chunks of at most ``eval_batch``, and that
    width keeps the old chunks, so the old seeds and the scores already kept)."""
    from bipace_envs.textcraft.tasks import list_tasks
    goals = len(list(list_tasks("agentgym", "test", tuple(depths))))
    return min(77, eval_tasks or goals, goals)


def from_legacy(old: dict, folder: Path) -> dict:
    """A pre-preset ``table_settings.json`` (train_table's flags) as the stored form of today."""
    from agents.config import TrainConfig
    from agents.models import model_folder
    flags = {k: old[k] if k in old else EARLIER_DEFAULTS.get(k, d) for k, d in LEGACY_FLAG_DEFAULTS.items()}
    of_model = TrainConfig(model=flags["model"])
    hidden = flags["hidden_layer"]
    if hidden is None:
        hidden = of_model.resolved_hidden_layer() or 0
    lora_layers = flags["rl_lora_layers"]
    if lora_layers is None:
        warm = folder / "warm_start"
        lora_layers = half_blocks(warm if (warm / "config.json").exists() else model_folder(flags["model"]))
    eval_tasks = flags["eval_tasks"]
    config = TrainConfig(
        preset_name="textcraft-table", env="textcraft", model=flags["model"],
        env_kwargs=json.dumps({"preset": "agentgym", "depths": flags["depths"]}),
        max_steps=flags["max_steps"], history_length=flags["history_length"], require_think="no",
        compact_prompts="yes", show_admissible=flags["show_admissible"],
        max_new_tokens=flags["max_new_tokens"],
        threads=2, lora_rank=flags["lora_rank"], lora_alpha=2 * flags["lora_rank"], lora_layers=lora_layers,
        sft_steps=flags["sft_steps"], sft_lr=flags["sft_lr"], sft_batch=flags["sft_batch"],
        sft_passes=flags["sft_passes"], sft_explore=flags["sft_explore"], sft_rename=flags["sft_rename"],
        rl_rename=flags["rl_rename"], iterations=flags["iterations"], batch_tasks=flags["batch_tasks"],
        group_size=flags["group_size"], temperature=flags["temperature"], lr=flags["lr"],
        kl_coef=flags["kl_coef"], invalid_penalty=flags["invalid_penalty"],
        skip_zero_adv=flags["skip_zero_adv"],
        mini_batch_rows=flags["mini_batch_rows"], micro_batch_rows=16, ppo_epochs=flags["ppo_epochs"],
        drift_rows=flags["drift_rows"], eps=of_model.resolved_eps(), hidden_layer=hidden,
        task_sampling=flags["task_sampling"], mode=flags["mode"], dynamic_sampling=flags["dynamic_sampling"],
        eval_before=True, eval_every=flags["eval_every"], eval_tasks=eval_tasks,
        eval_repeats=flags["eval_repeats"], eval_batch=legacy_eval_width(eval_tasks, flags["depths"]),
        eval_temperature=flags["eval_temperature"], checkpoint_every=1, tensorboard=True)
    table = table_defaults({k: flags[k] for k in TABLE_OPTIONS})
    return {"format": FORMAT, "preset": "textcraft-table", "config": dataclasses.asdict(config),
            "table": table, "mapped_from_legacy": old}


def load(folder: Path) -> dict | None:
    """A table folder's stored settings in today's form (None for a folder without them: a new table)."""
    path = folder / "table_settings.json"
    if not path.exists():
        return None
    stored = json.loads(path.read_text())
    return stored if stored.get("format") == FORMAT else from_legacy(stored, folder)


def save(folder: Path, preset: str, config, table: dict) -> None:
    """Writes ``table_settings.json``; a legacy file's original is kept beside it the first time."""
    path = folder / "table_settings.json"
    if path.exists() and json.loads(path.read_text()).get("format") != FORMAT:
        legacy = folder / "table_settings.legacy.json"
        if not legacy.exists():
            legacy.write_text(path.read_text())
    data = {"format": FORMAT, "preset": preset, "config": dataclasses.asdict(config), "table": table}
    path.write_text(json.dumps(data, indent=1))


def shaping_diff(stored: dict, config, table: dict, runs_started: bool) -> dict:
    """{setting: (stored, now)} of the settings that differ from a table folder's and shape its runs;
    before its first RL run, the settings that shape only RL runs may change."""
    from agents.config import TrainConfig
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    stored_config = TrainConfig(**{k: v for k, v in stored["config"].items() if k in known})

    def shaping(c) -> dict:
        return {k: v for k, v in dataclasses.asdict(c.bigpo_written_out()).items() if k not in NOT_SHAPING}
    then, now = {**shaping(stored_config), **stored["table"]}, {**shaping(config), **table}
    diff = {k: (then.get(k), v) for k, v in now.items() if then.get(k) != v}
    if not runs_started:
        for key in RL_ONLY:
            diff.pop(key, None)
    return diff
