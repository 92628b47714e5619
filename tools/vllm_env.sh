#!/usr/bin/env bash
# Build the virtual environment that holds vLLM 0.33.0's own scheduler for the conformance test
# (tests/conformance/). Kept apart from simserve's environment: vLLM pins its own torch and many packages.
# Usage: tools/vllm_env.sh [VENV_DIR]   (default: .venv-vllm in the repository root)
# torch 2.14.1 is the build on this machine kind's disk (found through pip's configured indexes); vLLM goes in
# with --no-deps because its full dependency set would pull another torch (several GB). The packages below are
# what vllm.v1.core.sched.scheduler imports (notes/vllm-scheduler-on-cpu.md), not vLLM's whole Requires-Dist.
# tools/vllm_env.constraints.txt pins every one at the versions the conformance table in docs/engines.md was
# measured with (`pip freeze` of that environment), so a later release of one of them cannot break the import.
# Time here: 4 min 47 s with a cold pip cache, 4 min 11 s warm (2 shared cores).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${1:-$(dirname "$HERE")/.venv-vllm}"
PY="${PYTHON:-python3}"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check -c "$HERE/vllm_env.constraints.txt")
"${PIP[@]}" "torch==2.14.1"
"${PIP[@]}" --no-deps "vllm==0.33.0"
"${PIP[@]}" regex cachetools psutil "transformers>=5.16,<5.21" tokenizers huggingface_hub safetensors protobuf \
    pydantic msgspec pyzmq cloudpickle lark orjson jsonschema starlette multidict filelock pyyaml cbor2 aiohttp \
    openai pillow pybase64 uvloop py-cpuinfo prometheus_client xgrammar fastapi partial-json-parser llguidance \
    einops openai-harmony numpy sentencepiece requests tqdm typing_extensions
VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c "from vllm.v1.core.sched.scheduler import Scheduler; import vllm; print('vllm', vllm.__version__)"
