#!/usr/bin/env bash
# Build the virtual environment that holds SGLang 0.5.23's own scheduling code for the conformance tests
# (tests/conformance/test_sglang_loop.py, its scheduler closed loop; test_sglang_conformance.py, its admission
# open loop). Kept apart from simserve's environment, as vLLM's is (tools/vllm_env.sh). SGLang goes in with
# --no-deps (its Requires-Dist pulls a CUDA torch and GPU kernels); the CPU torch 2.13.0 that lies on this
# machine kind's disk stands in for its torch 2.14.1 (the scheduler's batches and KV pools are small CPU
# tensors there). The packages below are what `sglang.srt.managers.scheduler` imports on the way (found one at
# a time), also --no-deps; modules only a GPU server needs (sgl_kernel, flashinfer, torchvision's ops, the
# HTTP server, ...) are stubbed at import by tests/conformance/sglang_stubs.py, and torchvision is installed
# only for its version metadata (transformers reads it). Pinned to the versions the tables in docs/engines.md
# were measured with (tools/sglang_env.constraints.txt, `pip freeze`).
# Usage: tools/sglang_env.sh [VENV_DIR]   (default: .venv-sglang in the repository root). About 2.4 GB.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${1:-$(dirname "$HERE")/.venv-sglang}"
PY="${PYTHON:-python3}"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check -c "$HERE/sglang_env.constraints.txt")
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" --no-deps "sglang==0.5.23" numpy orjson psutil pybase64 requests urllib3 idna charset-normalizer \
    certifi packaging pillow starlette anyio sniffio msgspec pydantic pydantic_core annotated-types \
    typing-inspection pyzmq tqdm dill pyyaml regex huggingface_hub safetensors tokenizers transformers httpx2 \
    httpcore2 truststore h11 triton torchvision gguf openai jiter distro httpx httpcore
"$VENV/bin/python" -W ignore -c "
import sys; sys.path.insert(0, '$(dirname "$HERE")/tests/conformance')
import sglang_stubs
from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.managers.scheduler import Scheduler
import sglang; print('sglang', sglang.__version__)"
