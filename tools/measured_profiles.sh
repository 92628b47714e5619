#!/usr/bin/env bash
# Regenerate the shipped measured profiles (profiles/h100-sxm/*, profiles/h200/*) from NVIDIA's per-op tables.
# Needs `pip install -e '.[measured]'` (aiconfigurator-core 0.12.0); no GPU. docs/profiling.md, "Measured backend".
set -euo pipefail
# TP degrees from the smallest whose weights fit beside some KV cache on an 80 GB GPU, up to the 8-GPU box.
declare -A TPS=([mistral-7b]=1,2,4,8 [llama-2-7b]=1,2,4,8 [llama-3-8b]=1,2,4,8 [yi-34b]=1,2,4,8
                [llama2-70b]=2,4,8 [falcon-180b]=4,8)
for gpu in h100 h200; do
  for model in mistral-7b yi-34b llama2-70b falcon-180b llama-2-7b llama-3-8b; do
    simserve profile --backend measured --engine vllm --gpu "$gpu" --model "$model" --tp "${TPS[$model]}" \
      --max-model-len 16384 --max-tokens 16384 --out profiles --force "$@"
  done
done
