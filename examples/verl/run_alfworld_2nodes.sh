#!/usr/bin/env bash
# ALFWorld x Qwen2.5-1.5B-Instruct on 2 nodes x 8 GPUs through a Ray cluster, verl 0.9.1 + bipace.
# Before: on every node the same checkout at the same path, `pip install -e ".[verl]"` (+ vLLM), and the
# ALFWorld games and data/verl/alfworld/*.parquet at the same absolute paths (a shared filesystem);
#   head:   ray start --head --port=6379
#   worker: ray start --address=<head-ip>:6379
# then run this script on the head node. Usage: run_alfworld_2nodes.sh [ESTIMATOR] [overrides...]
set -euo pipefail
cd "$(dirname "$0")/../.."
ESTIMATOR=${1:-gigpo}
shift $(( $# > 1 ? 1 : $# ))
export RAY_ADDRESS=${RAY_ADDRESS:-auto}     # verl's ray.init joins the running cluster
export NNODES=2
exec examples/verl/run_alfworld_1node.sh 8 "$ESTIMATOR" \
  data.train_batch_size=32 actor_rollout_ref.rollout.agent.num_workers=16 "$@"
