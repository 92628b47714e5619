"""`vllm serve` of vLLM 0.33.0's GPU wheel on a CPU-only machine, engine configured as on a GPU.

    PYTHONPATH=tools /work/envs/vllm033/bin/python tools/engine_cpu_vllm_serve.py MODEL_DIR --worker-cls \
        engine_cpu_fake_worker.TimedWorker [vllm serve flags...]

Without a GPU vLLM picks its CPU platform, whose `check_and_update_config` (vllm/platforms/cpu.py) turns async
scheduling off ("not required on CPU") and moves a single worker to the multiprocess executor (for OpenMP). A
GPU run of 0.33.0 has async scheduling on (`VllmConfig`'s default when nothing is incompatible,
vllm/config/vllm.py) and, at TP 1, the worker inside the EngineCore process (UniProcExecutor). This wrapper
restores those two settings after the platform's hook and then runs vLLM's own CLI unchanged (the hook runs
where the config is made, in the API-server process; the EngineCore process receives the finished config).
Nothing else is altered.
"""

from __future__ import annotations

import sys


def main() -> None:
    from vllm.platforms.cpu import CpuPlatform

    original = CpuPlatform.check_and_update_config.__func__

    def as_on_gpu(cls, vllm_config) -> None:
        was = vllm_config.scheduler_config.async_scheduling
        original(cls, vllm_config)
        vllm_config.scheduler_config.async_scheduling = was is not False
        if vllm_config.parallel_config.world_size == 1:
            vllm_config.parallel_config.distributed_executor_backend = "uni"

    CpuPlatform.check_and_update_config = classmethod(as_on_gpu)
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "serve", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
