#!/usr/bin/env bash
# ALFWorld x Qwen2.5-0.5B-Instruct (or 1.5B) on ONE GPU, verl 0.9.1 + bipace: FSDP actor and vLLM rollouts
# share the GPU (verl's hybrid engine: vLLM sleeps while the actor trains).
# Needs: a CUDA GPU, vLLM, and the model in a local folder (no hub access needed), e.g.
# MODEL_PATH=/models/Qwen2.5-0.5B-Instruct. Never run on a GPU yet (docs/verl.md); memory is an estimate:
# 0.5B should fit 24 GB, 1.5B wants 40 GB+ or the actor offload below.
# Usage: MODEL_PATH=/path/to/Qwen2.5-0.5B-Instruct examples/verl/run_alfworld_1gpu.sh [ESTIMATOR] [overrides...]
# Batch sizes: 8 tasks x 4 episodes per iteration; one optimiser step per 4 tasks x 4 = 16 step samples
# (verl multiplies ppo_mini_batch_size by rollout.n and pads each batch to a multiple of it).
# For 1.5B on a smaller GPU add: actor_rollout_ref.actor.fsdp_config.param_offload=true
#   actor_rollout_ref.actor.fsdp_config.optimizer_offload=true
# BIPACE_VERL_CHECK_ONLY=1 validates the config without a GPU (tests/verl run it so).
set -euo pipefail
cd "$(dirname "$0")/../.."
ESTIMATOR=${1:-gigpo}
shift $(( $# > 1 ? 1 : $# ))
MODEL_PATH=${MODEL_PATH:?set MODEL_PATH to a local folder of Qwen2.5-0.5B-Instruct or Qwen2.5-1.5B-Instruct}
exec examples/verl/run_alfworld_1node.sh 1 "$ESTIMATOR" \
  actor_rollout_ref.model.path="$MODEL_PATH" \
  data.train_batch_size=8 actor_rollout_ref.rollout.n=4 \
  actor_rollout_ref.actor.ppo_mini_batch_size=4 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
  actor_rollout_ref.rollout.gpu_memory_utilization=0.4 actor_rollout_ref.rollout.agent.num_workers=2 \
  data.max_prompt_length=3072 data.max_response_length=384 \
  trainer.experiment_name=alfworld_1gpu "$@"
