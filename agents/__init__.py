"""LLM agents for bipace envs: policies (transformers + peft LoRA), prompts and action parsing,
batched rollouts that record BiGPO hidden states, a PPO trainer for any estimator, and SFT warm start.

    bipace-train --env textcraft --estimator bipace --model tiny --sft-steps 300   # see agents/cli.py

Modules: ``models`` (load / LoRA / tiny offline model), ``prompts`` + ``parsing``, ``envs`` (per-env
reward maps, splits, experts), ``rollout``, ``ppo`` (loss pieces), ``trainer``, ``sft``, ``config``, ``cli``.
Submodules are imported on demand so ``import agents`` stays cheap.
"""
