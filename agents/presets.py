"""Named training presets: the settings the project's results were measured with, each a complete
``TrainConfig``. The one place recommended settings live; ``bipace-train --preset``, ``bipace-compare
--preset``, ``benchmarks.learning.train_table`` and every benchmark that trains start from one of these.

    from agents.presets import get_preset, PRESETS
    cfg = get_preset("textcraft-table", ["iterations=4", "out_dir=runs/tc"])   # preset + FIELD=VALUE
    bipace-train --preset textcraft-table --iterations 4 --set lr=1e-3       # explicit flags override
    bipace-compare --preset tiny --set iterations=2
    cfg = config_from_args(["--preset", "smoke", "--iterations", "3"])         # as bipace-train parses

A preset is a function returning a ``TrainConfig`` whose docstring says what it is for and where its
numbers come from (``docs/experiments.md`` holds the runs). ``preset_name`` records which one a run started
from, so a finished run's ``config.json`` holds its preset and every field.
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Callable

from agents.config import TrainConfig, build_parser


@dataclass(frozen=True)
class Preset:
    """A preset: how to build its config, and the estimators and seeds a comparison runs by default."""
    name: str
    build: Callable[[], TrainConfig]
    estimators: tuple = ("grpo", "gigpo", "bipace")
    seeds: tuple = (0,)

    @property
    def doc(self) -> str:
        return (self.build.__doc__ or "").strip()

    def config(self) -> TrainConfig:
        return dataclasses.replace(self.build(), preset_name=self.name)


PRESETS: dict[str, Preset] = {}
# names the comparison's presets had before they moved here (bipace-compare --preset embedded still works)
ALIASES = {"embedded": "compare", "qwen1.5b": "qwen1.5b-alfworld"}


def register(name: str, estimators=("grpo", "gigpo", "bipace"), seeds=(0,)):
    def wrap(build):
        PRESETS[name] = Preset(name, build, tuple(estimators), tuple(seeds))
        return build
    return wrap


@register("textcraft-table", seeds=(0, 1))
def textcraft_table() -> TrainConfig:
    """The TextCraft RL setting of the results table (``python -m benchmarks.learning.train_table``), on CPU.

    SmolLM2-135M-Instruct, depth-1 TextCraft goals (101 training, 27 held-out x 12 episodes at T=0.4), a
    LoRA SFT warm start (120 steps at lr 1e-3, batch 8: at 2e-4 it never won a 2-ingredient goal, so RL
    had nothing to reinforce there), then 10 RL iterations of 8 goals x G=6 at lr 1.5e-3 (10 rather than 6
    iterations: grpo gained there), LoRA rank 16 on the top 15 of 30 blocks for RL (the backward pass
    stops there), no KL term (at most 0.001 while its reference forward cost 28% of the update), no
    invalid-format penalty (the warm start answers in format 98-100% of the time; a penalty made all-fail
    groups' returns unequal and GRPO's std normalisation amplified the noise), rows with zero advantage
    skipped, compact prompts of 6 past steps without the admissible list. BiGPO's layer and radius: the
    model's named setting (agents/models.py MODEL_PRESETS, docs/estimators.md). The table
    itself adds a one-time screen of the training goals (RL samples the multi-ingredient goals the warm
    start won, plus 8 simpler ones) and warm-starts with LoRA on every block; ``bipace-train --preset
    textcraft-table`` samples every training goal and its SFT adapts the same top 15 blocks. Evaluations
    step 27 envs together: the 324 held-out episodes in 12 chunks of 27, the chunks (and so the seeds) the
    documented tables were scored with. Runs and dates: docs/experiments.md.
    """
    return TrainConfig(
        env="textcraft", model="smollm2-135m", env_kwargs='{"preset": "agentgym", "depths": [1]}',
        max_steps=6, history_length=6, require_think="no", compact_prompts="yes", show_admissible=False,
        max_new_tokens=32, threads=2, lora_rank=16, lora_alpha=32, lora_layers=15,
        sft_steps=120, sft_lr=1e-3, sft_batch=8,
        iterations=10, batch_tasks=8, group_size=6, temperature=1.0, lr=1.5e-3, kl_coef=0.0,
        invalid_penalty=0.0, skip_zero_adv=True, mini_batch_rows=64, micro_batch_rows=16, drift_rows=32,
        eval_before=True, eval_every=0, eval_tasks=0, eval_repeats=12,
        eval_batch=27, eval_temperature=0.4, checkpoint_every=1, tensorboard=True)


@register("compare")
def compare() -> TrainConfig:
    """The one-command comparison (``bipace-compare`` with no arguments), about 22 minutes on 2 CPU cores.

    SmolLM2-135M-Instruct on depth-1 TextCraft goals: a short shared LoRA warm start (60 steps at 2e-4;
    the zero-shot model chats instead of acting), then 4 RL iterations of 4 goals x G=4 at lr 5e-4 per
    estimator. Depth 1 because this warm start wins about a third of those goals, so groups mix wins and
    losses; on depth 1-2 goals it won 0 of 72 episodes and no update saw an episode-level signal. The
    comparison first measures every estimator's advantage accuracy on this warm start's rollouts
    (``benchmarks.credit.advantage_accuracy.SIZES["compare"]``), then trains 2 RL iterations per estimator
    (4 took 16 minutes for three estimators and gave success curves identical within their intervals), and
    plays every held-out goal (27) once at the end. ``textcraft-table`` measures learning.
    """
    return TrainConfig(
        env="textcraft", model="smollm2-135m", env_kwargs='{"preset": "agentgym", "depths": [1]}',
        max_steps=5, history_length=5, show_admissible=False, max_new_tokens=32, temperature=1.0,
        invalid_penalty=0.0, batch_tasks=4, group_size=4, lr=5e-4, lora_rank=16, lora_alpha=32,
        skip_zero_adv=True, mini_batch_rows=64, micro_batch_rows=16, iterations=2, eval_every=0,
        eval_tasks=0, eval_repeats=1, eval_batch=27, checkpoint_every=0, sft_steps=60, sft_lr=2e-4,
        sft_batch=8, threads=2, tensorboard=False)


@register("tiny", seeds=(0, 1))
def tiny() -> TrainConfig:
    """The 1M-parameter model trained from scratch on depth 1-2 TextCraft goals, about 18 minutes on 2 CPU
    cores: it imitates training goals and does not generalise (held-out success stayed at 8-11% in every
    run), so it tests the machinery, not the estimators. The comparison's default before SmolLM2."""
    return TrainConfig(
        env="textcraft", model="tiny", env_kwargs='{"preset": "agentgym", "depths": [1, 2]}',
        max_steps=8, history_length=8, show_admissible=False, max_new_tokens=24, temperature=0.5,
        batch_tasks=4, group_size=4, lr=2e-4, mini_batch_rows=32, micro_batch_rows=16, iterations=8,
        eval_every=4, eval_tasks=40, eval_batch=40, checkpoint_every=0, sft_steps=800, sft_lr=3e-3,
        sft_batch=16, threads=2, tensorboard=False)


@register("smoke")
def smoke() -> TrainConfig:
    """The smallest run that goes through every stage (SFT, rollouts, estimator, update, evaluation,
    checkpoint) in seconds: the tiny model, 2 goals x G=2, 2 steps of 6 tokens. For tests and for checking
    an installation; its numbers mean nothing."""
    return TrainConfig(
        env="textcraft", model="tiny", env_kwargs='{"preset": "agentgym", "depths": [1, 2]}',
        max_steps=2, history_length=2, show_admissible=False, max_new_tokens=6, temperature=1.0,
        batch_tasks=2, group_size=2, mini_batch_rows=0, micro_batch_rows=16, iterations=2, eval_every=1,
        eval_tasks=2, eval_batch=2, checkpoint_every=0, sft_steps=2, sft_batch=4, threads=1,
        tensorboard=False, progress=False)


@register("alfworld-table", estimators=("gigpo", "bipace"), seeds=(0, 1))
def alfworld_table() -> TrainConfig:
    """ALFWorld on CPU (``python -m benchmarks.learning.env_table --preset alfworld-table``):
    SmolLM2-135M-Instruct, a LoRA SFT warm start on the handcoded expert's trajectories of 120 generated
    training games (20 per task type), RL on those games, scored on a fixed subset of the real validation
    games (10 per task type of valid_seen and of valid_unseen: 120 episodes, ``games_per_task`` spreads them
    over each type's games).

    Costs set the shape. A zero-shot episode step took 0.76 s at 12 envs (SmolLM2 writing 32 tokens,
    engine step 85 ms, game load 1 s), so: a 30-step horizon (the paper's 50 is above almost every
    handcoded plan on the generated games; the valid games' planner walkthroughs are longer, mostly for
    pick_two), compact prompts that name the room's receptacles once in the task line and list only the
    local actions at each step (``agents.prompts.ALFWorldPrompter``: ~200 fewer tokens a step), a history
    as long as the horizon (every prompt extends the previous one, so the carried cache runs only the new
    line), 32 answer tokens without <think>. RL: 4 games x G=4, LoRA on the top 15 blocks, lr 1e-3, no
    KL, no format penalty, zero-advantage rows skipped (as textcraft-table). Evaluations step at most 40
    envs: a split's 60 games run as 2 equal chunks of 30 (``agents.evaluation.chunk_width``; 40 + 20
    played 20 padding episodes, a third of the evaluation, for nothing). Data: point
    ``eval_env_kwargs``' ``data_dir`` at the folder holding ``json_2.1.1`` (this project's machines: the
    shared copy). Runs and dates: docs/experiments.md.
    """
    return TrainConfig(
        env="alfworld", model="smollm2-135m", env_kwargs='{"games_per_task": 20}',
        eval_env_kwargs='{"data_dir": "../shared/data/alfworld", "games_per_task": 10}',
        train_split="train", eval_split="valid_seen",
        max_steps=30, history_length=30, require_think="no", compact_prompts="yes", show_admissible=True,
        max_new_tokens=32, threads=2, lora_rank=16, lora_alpha=32, lora_layers=15,
        sft_steps=300, sft_lr=1e-3, sft_batch=8,
        iterations=6, batch_tasks=4, group_size=4, temperature=1.0, lr=1e-3, kl_coef=0.0,
        invalid_penalty=0.0, skip_zero_adv=True, mini_batch_rows=64, micro_batch_rows=16,
        eval_before=False, eval_every=0, eval_tasks=0,
        eval_repeats=1, eval_batch=40, eval_temperature=0.4, checkpoint_every=1, tensorboard=False)


@register("webshop-table", estimators=("gigpo", "bipace"), seeds=(0, 1))
def webshop_table() -> TrainConfig:
    """WebShop on CPU (``python -m benchmarks.learning.env_table --preset webshop-table``):
    SmolLM2-135M-Instruct on the generated catalogue (2,000 products; verl-agent's split: goals 500+ train,
    0-499 test), a LoRA SFT warm start on the imitable oracle's episodes of 300 training goals
    (``oracle_action("any_perfect")``: it searches the instruction text and buys the first listed product that
    scores 1.0; the goal-product oracle searched product titles on half the goals), RL on the training goals
    the warm start won in a screen of 160, scored on the first 200 test goals and on the fixture's real
    products (5 goals x 8 episodes). A 10-step horizon (the oracle needs at most 9, typically 5) and the whole
    episode in the prompt, each past page clipped to 120 characters (``history_chars``; the current page
    whole): result pages are most of a prompt's tokens, and a clipped line never changes, so an episode's
    later prompts extend its earlier ones (carried caches, shared spines in the SFT). On the oracle's 508
    steps of 100 training goals that is 444 SmolLM2 tokens a prompt on average (max 896), against 783 (max
    2,383) with whole pages, whose SFT took 22+ s a step and 17 GB, or 637 with the last 3 steps whole. 48
    answer tokens (search queries are instruction text). RL as alfworld-table: 8 goals x G=4, top 15 blocks,
    lr 1e-3, no KL, no format penalty. Runs: docs/experiments.md."""
    return TrainConfig(
        env="webshop", model="smollm2-135m", env_kwargs="{}", eval_env_kwargs="{}",
        train_split="train", eval_split="test",
        max_steps=10, history_length=10, history_chars=120, require_think="no", compact_prompts="yes",
        show_admissible=True,
        max_new_tokens=48, threads=2, lora_rank=16, lora_alpha=32, lora_layers=15,
        sft_steps=300, sft_lr=1e-3, sft_batch=8, sft_episodes=300,
        iterations=8, batch_tasks=8, group_size=4, temperature=1.0, lr=1e-3, kl_coef=0.0,
        invalid_penalty=0.0, skip_zero_adv=True, mini_batch_rows=64, micro_batch_rows=16,
        eval_before=False, eval_every=0, eval_tasks=200,
        eval_repeats=1, eval_batch=40, eval_temperature=0.4, checkpoint_every=1, tensorboard=False)


@register("qwen1.5b-alfworld", seeds=(0, 1, 2))
def qwen_alfworld() -> TrainConfig:
    """The paper's single-GPU setting: Qwen2.5-1.5B-Instruct on ALFWorld as in GiGPO and BiPACE (16 tasks x
    G=8 per iteration, 150 iterations, gamma 0.95, BiGPO radius 0.05, mean/std normalisation, 512 response
    tokens, prompts up to 4096 tokens cut on the left), bfloat16 with LoRA and gradient checkpointing.
    Not run to the end on this project's machines (no GPU); see README "GPUs"."""
    return TrainConfig(
        env="alfworld", model="Qwen/Qwen2.5-1.5B-Instruct", dtype="bfloat16", device="cuda",
        gradient_checkpointing=True, batch_tasks=16, group_size=8, max_new_tokens=512,
        max_prompt_tokens=4096, truncation="left", iterations=150, gamma=0.95, bigpo_setting="paper",
        mode="mean_std_norm", eval_every=5, eval_tasks=128, tensorboard=True)


def resolve_name(name: str) -> str:
    name = ALIASES.get(name, name)
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; presets: {', '.join(sorted(PRESETS))} "
                         "(agents/presets.py)")
    return name


def parse_sets(items: list[str]) -> dict:
    """``["FIELD=VALUE", ...]`` as typed ``TrainConfig`` overrides; a clear error for an unknown field or
    a value of the wrong type."""
    types = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    takes_auto = {f.name for f in dataclasses.fields(TrainConfig) if "auto" in f.metadata}
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in types:
            raise ValueError(f"--set expects FIELD=VALUE with a TrainConfig field; got {item!r}. "
                             f"Fields: {sorted(types)}")
        typ = types[key] if isinstance(types[key], str) else types[key].__name__
        if typ == "bool":
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(f"--set {key}: expected true/false, got {value!r}")
            out[key] = value.lower() in ("1", "true", "yes")
        elif key in takes_auto and value.strip().lower() == "auto":
            out[key] = "auto"                 # TrainConfig stores the automatic value
        elif typ.startswith("str | None"):
            out[key] = None if value.lower() in ("", "none") else value
        else:
            try:
                out[key] = {"int": int, "float": float}.get(typ, str)(value)
            except ValueError:
                raise ValueError(f"--set {key}: expected {typ}, got {value!r}") from None
    return out


def get_preset(name: str, sets: list[str] | dict | None = None) -> TrainConfig:
    """The preset ``name``'s config with ``sets`` applied (``FIELD=VALUE`` strings or a dict)."""
    cfg = PRESETS[resolve_name(name)].config()
    overrides = parse_sets(sets) if isinstance(sets, list) else dict(sets or {})
    return dataclasses.replace(cfg, **overrides)


def describe() -> str:
    """Every preset's name and the first line of its docstring (for ``--help``)."""
    return "\n".join(f"  {name}: {p.doc.splitlines()[0]}" for name, p in sorted(PRESETS.items()))


def cli_parser(**kw) -> argparse.ArgumentParser:
    """``bipace-train``'s parser: ``--preset NAME`` and ``--set FIELD=VALUE`` beside one option per field."""
    parser = build_parser(**kw)
    parser.add_argument("--preset", default="", metavar="NAME",
                        help="start from a named preset (agents/presets.py); flags given override it:\n"
                             + describe())
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="any TrainConfig field (repeatable), applied after the flags")
    return parser


def config_from_args(argv=None, parser: argparse.ArgumentParser | None = None) -> TrainConfig:
    """The config of a command line: the ``--preset``'s (or TrainConfig's defaults), then the flags given,
    then ``--set FIELD=VALUE``. Raises ValueError for an unknown preset or a bad ``--set``."""
    parser = parser or cli_parser()
    known, _ = parser.parse_known_args(argv)
    base = TrainConfig()
    if known.preset:
        base = get_preset(resolve_name(known.preset))
        # the preset's values become the defaults, so only flags actually given override them
        parser.set_defaults(**{k: v for k, v in dataclasses.asdict(base).items() if k != "preset_name"})
    args = vars(parser.parse_args(argv))
    sets = parse_sets(args.pop("set"))
    args.pop("preset")
    return dataclasses.replace(base, **{**args, **sets})
