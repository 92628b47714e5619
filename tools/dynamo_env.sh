#!/usr/bin/env bash
# Build the virtual environment that holds NVIDIA Dynamo 1.6.1's planner for the conformance test
# (tests/conformance/test_dynamo_planner.py). Kept apart from simserve's environment, as vLLM's is
# (tools/vllm_env.sh). ai-dynamo goes in with --no-deps: its Requires-Dist pulls ai-dynamo-runtime (a compiled
# runtime), aisimulate (not on the index here), kubernetes, transformers and more, none of which the planner's
# scaling state (dynamo.planner.core.state_machine.PlannerScalingState, its load and throughput mixins and its
# config) needs. What those modules import on the way is pydantic and PyYAML; the few package __init__ files and
# the one runtime helper that would pull the rest are bypassed at import by tests/conformance/dynamo_driver.py.
# Pinned in tools/dynamo_env.constraints.txt. Usage: tools/dynamo_env.sh [VENV_DIR] (default: .venv-dynamo in
# the repository root).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VENV="${1:-$(dirname "$HERE")/.venv-dynamo}"
PY="${PYTHON:-python3}"
"$PY" -m venv "$VENV"
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check -c "$HERE/dynamo_env.constraints.txt")
"${PIP[@]}" --no-deps "ai-dynamo==1.6.1"
"${PIP[@]}" pydantic pyyaml
"$VENV/bin/python" "$(dirname "$HERE")/tests/conformance/dynamo_driver.py" --version
