#!/usr/bin/env bash
# ALFWorld x Qwen2.5-1.5B-Instruct on one node with N GPUs (default 8), verl 0.9.1 + bipace.
# Needs CUDA GPUs and vLLM (pip install -e ".[verl]" plus verl's vllm extra); not runnable on CPU.
# Usage: examples/verl/run_alfworld_1node.sh [N_GPUS] [ESTIMATOR] [extra hydra overrides...]
# ESTIMATOR: any name of estimators.REGISTRY (default gigpo); bipace and bigpo included, their hidden states
# come from the old-log-prob forward (set the layer with bipace.hidden_layer=N).
# BIPACE_VERL_CHECK_ONLY=1: compose and validate the config (verl's validate_config + ours), start nothing.
# PYTHON: the interpreter of the [verl] environment (default: python).
set -euo pipefail
cd "$(dirname "$0")/../.."
N_GPUS=${1:-8}
ESTIMATOR=${2:-gigpo}
shift $(( $# > 2 ? 2 : $# ))
PYTHON=${PYTHON:-python}
ALFWORLD=${ALFWORLD_DATA:-../shared/data/alfworld}
if [ ! -f data/verl/alfworld/train.parquet ] && [ "${BIPACE_VERL_CHECK_ONLY:-0}" = 0 ]; then
  "$PYTHON" -m agents.verl_bridge.dataset --env alfworld --out data/verl/alfworld \
    --env-kwargs "{\"data_dir\": \"$(realpath "$ALFWORLD")\"}" --train-split train --val-split valid_unseen
fi
"$PYTHON" -m agents.verl_bridge.main --config-path "$PWD/examples/verl" --config-name alfworld_qwen1.5b \
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$PWD/agents/verl_bridge/config/agent_loop.yaml" \
  data.train_files="$PWD/data/verl/alfworld/train.parquet" data.val_files="$PWD/data/verl/alfworld/val.parquet" \
  algorithm.adv_estimator="$ESTIMATOR" trainer.n_gpus_per_node="$N_GPUS" trainer.nnodes="${NNODES:-1}" "$@"
