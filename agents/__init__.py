"""LLM agents for bipace envs: policies (transformers + peft LoRA), prompts and action parsing,
batched rollouts that record BiGPO hidden states, a PPO trainer for any estimator, and SFT warm start.

    bipace-train --preset smoke --out-dir runs/smoke            # see agents/cli.py and agents/presets.py

Modules: ``models`` (load / LoRA / tiny offline model), ``prompts`` + ``parsing``, ``envs`` (per-env
reward maps, splits, experts), ``rollout``, ``ppo`` (loss pieces), ``trainer`` with ``evaluation``
(held-out scoring, resumable by chunks), ``checkpoints`` and ``train_log``, ``sft``, ``config``,
``presets`` (named settings), ``runs`` (load a finished run), ``goal_screen`` (which goals RL samples),
``run_folder`` (one writer per run folder), ``run_loop`` (a run's evaluations, logs, checkpoints and
summary), ``finite`` (NaN checks), ``crash_points`` (where a crash-consistency check kills a run), ``cli``.
Submodules are imported on demand so ``import agents`` stays cheap.
"""
