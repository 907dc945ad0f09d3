"""LLM agents for bipace envs: policies (transformers + peft LoRA), prompts and action parsing,
batched rollouts that record BiGPO hidden states, a PPO trainer for any estimator, and SFT warm start.

    bipace-train --preset smoke --out-dir runs/smoke            # see agents/cli.py and agents/presets.py

Modules: ``models`` (load / LoRA / tiny offline model), ``prompts`` + ``parsing``, ``envs`` (per-env
reward maps, splits, experts), ``rollout``, ``ppo`` (loss pieces), ``trainer`` with ``evaluation``
(held-out scoring, resumable by chunks), ``checkpoints`` and ``train_log``, ``sft``, ``config``,
``presets`` (named settings), ``runs`` (load a finished run), ``goal_screen`` (which goals RL samples),
``cli``.
Submodules are imported on demand so ``import agents`` stays cheap.
"""
