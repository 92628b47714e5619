"""Run at start-up by every Python process whose path holds this folder (tools/sglang_cpu_server.py puts it on
the measured SGLang server's PYTHONPATH; SGLang starts its scheduler and detokenizer with multiprocessing's
spawn, so each is a fresh interpreter): GPU-only modules stubbed, the model's forward replaced once the
scheduler module is imported (tools/sglang_cpu_patch.py). Does nothing unless SGLANG_CPU_PATCH=1."""

import os
import sys

if os.environ.get("SGLANG_CPU_PATCH") == "1":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import sglang_cpu_patch

    sglang_cpu_patch.install_for_server()
