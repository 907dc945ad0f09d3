"""The values a ``TrainConfig`` may hold, checked when one is made (presets, ``--set``, flags, the Python
API): types, finite numbers, ranges, sizes of at least one, JSON objects without NaN, so a bad value stops
a run before it starts instead of training a NaN adapter.

    check_config(cfg)       # ValueError naming the first bad field, its value and what it must be
"""
from __future__ import annotations

import dataclasses
import math

AT_LEAST_ONE = ("batch_tasks", "group_size", "iterations", "max_new_tokens", "max_prompt_tokens",
                "micro_batch_rows", "ppo_epochs", "eval_repeats", "eval_batch", "lora_rank", "lora_alpha",
                "dynamic_sampling_rounds", "sft_batch", "sft_passes")
"""Int fields that are sizes or counts of at least one; every other int field but ``hidden_layer`` (a layer
index, negative from the top) must be >= 0, where 0 means "off", "all" or "the default" as its help says."""
SIGNED_INTS = ("hidden_layer",)
FLOAT_RULES = {
    "lr": (lambda v: v >= 0, "> 0, or auto (stored as 0) for the model's default rate"),
    "sft_lr": (lambda v: v > 0, "> 0"),
    "gamma": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "eps": (lambda v: v >= 0, ">= 0 (0 = the model's default radius)"),
    "temperature": (lambda v: v > 0, "> 0"),
    "eval_temperature": (lambda v: v >= 0, ">= 0 (0 = greedy)"),
    "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "weight_decay": (lambda v: v >= 0, ">= 0"),
    "grad_clip": (lambda v: v > 0, "> 0"),
    "clip_ratio": (lambda v: 0 < v < 1, "in (0, 1)"),
    "clip_low": (lambda v: 0 <= v < 1, "in [0, 1) (0 = clip_ratio)"),
    "clip_high": (lambda v: v >= 0, ">= 0 (0 = clip_ratio)"),
    "dual_clip": (lambda v: v > 1, "> 1"),
    "kl_coef": (lambda v: v >= 0, ">= 0 (0 = off)"),
    "rl_rename": (lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
    "sft_rename": (lambda v: 0 <= v <= 1, "a probability in [0, 1]"),
    "sft_explore": (lambda v: 0 <= v < 1, "a probability in [0, 1)"),
}
"""Float fields with a range; every float field (``step_weight``, ``invalid_penalty``, ``entropy_coef``
too) must be finite."""


def check_config(cfg) -> None:
    """Raise ValueError naming the first field whose value cannot be trained with: a wrong type, NaN or
    inf, a value out of its range, JSON that is not an object (or holds NaN/inf). Runs on every
    ``TrainConfig`` made (presets, ``--set``, flags, the Python API), so a bad value stops a run before it
    starts. ``lr="auto"`` is stored as 0."""
    for f in dataclasses.fields(cfg):
        value, typ = getattr(cfg, f.name), f.type if isinstance(f.type, str) else f.type.__name__
        if "auto" in f.metadata and isinstance(value, str) and value.strip().lower() == "auto":
            value = f.metadata["auto"]
            setattr(cfg, f.name, value)
        if typ == "bool" and not isinstance(value, bool):
            raise ValueError(f"{f.name} must be true or false; got {value!r}")
        if typ == "str" and not isinstance(value, str) or typ.startswith("str | None") and not (
                value is None or isinstance(value, str)):
            raise ValueError(f"{f.name} must be a string; got {value!r}")
        if typ == "int":
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{f.name} must be an integer; got {value!r}")
            low = 1 if f.name in AT_LEAST_ONE else None if f.name in SIGNED_INTS else 0
            if low is not None and value < low:
                raise ValueError(f"{f.name} must be >= {low}; got {value}")
        if typ == "float":
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"{f.name} must be a number; got {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number; got {value!r}")
            test, rule = FLOAT_RULES.get(f.name, (None, ""))
            if test is not None and not test(value):
                raise ValueError(f"{f.name} must be {rule}; got {value!r}")
    if cfg.resume and cfg.overwrite:
        raise ValueError("resume and overwrite exclude each other: --resume continues the run in out_dir, "
                         "--overwrite deletes it")
    cfg.env_kwargs_dict(held_out=True)
    if cfg.bigpo_setting:
        from agents.bigpo_settings import get_bigpo_setting
        get_bigpo_setting(cfg.bigpo_setting)
    bad = [k for k, v in cfg.estimator_options_dict().items() if not _finite_json(v)]
    if bad:
        raise ValueError(f"--estimator-options {bad[0]} must be finite; got "
                         f"{cfg.estimator_options_dict()[bad[0]]!r}")


def _finite_json(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_json(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_json(v) for v in value)
    return True
