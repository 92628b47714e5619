"""The engine command lines that start a planned deployment: `vllm serve` once per replica.

The plan's Sarathi token budget is vLLM's chunked-prefill budget (`--max-num-batched-tokens`; vLLM v1 chunks
prefills under it and runs decodes first, as Sarathi does); its resident-request cap is `--max-num-seqs`; the
memory rule is `--gpu-memory-utilization`; the trace's length cap is `--max-model-len`. Only flags vLLM 0.33
accepts are printed (the release simserve's engine model follows, docs/simulator.md): not
`--max-num-partial-prefills` or `--max-long-partial-prefills`, which vLLM 0.27 removed. Replicas are separate
servers, each on its own GPUs and port, behind a round-robin load balancer: the router the plan's replica rule
assumes (docs/planner.md).
"""

from __future__ import annotations

import shlex

from simserve.catalog.models import resolve_model

VLLM_RELEASE = "0.33.0"
FIRST_PORT = 8000


def vllm_serve(
    model: str,
    tp: int,
    pp: int,
    budget: int,
    max_batch: int,
    max_model_len: int,
    memory_utilization: float,
    dtype: str = "bf16",
    kv_dtype: str = "bf16",
    ep: int = 1,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """One replica's `vllm serve` arguments (the precision and expert flags as `simserve sweep --engine vllm`
    prints them: tune/engine.vllm_command), then `extra` (a plan with speculation:
    plan/speculation.serve_flags)."""
    args = ["vllm", "serve", resolve_model(model).hf_id]
    if tp > 1:
        args += ["--tensor-parallel-size", str(tp)]
    if pp > 1:
        args += ["--pipeline-parallel-size", str(pp)]
    args += ["--max-num-batched-tokens", str(budget), "--max-num-seqs", str(max_batch)]
    args += ["--gpu-memory-utilization", f"{memory_utilization:g}", "--max-model-len", str(max_model_len)]
    if dtype == "fp8":
        args += ["--quantization", "fp8"]  # an fp8 checkpoint is detected by itself; a bf16 one is quantised
    if kv_dtype == "fp8":
        args += ["--kv-cache-dtype", "fp8"]
    if ep > tp:  # attention DP (EP = DP × TP): one engine core per rank, in lockstep (sim/lockstep.py)
        args += ["--data-parallel-size", str(ep // tp)]
    if ep > 1:
        args += ["--enable-expert-parallel"]
    return args + list(extra)


def replica_commands(
    model: str,
    tp: int,
    pp: int,
    replicas: int,
    budget: int,
    max_batch: int,
    max_model_len: int,
    memory_utilization: float,
    gpus_per_node: int | None,
    dtype: str = "bf16",
    kv_dtype: str = "bf16",
    ep: int = 1,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """A shell line per replica. Replicas that fit a node get consecutive GPUs (CUDA_VISIBLE_DEVICES) and
    ports from 8000, counted per node; a replica larger than a node runs on a Ray cluster of its nodes (vLLM's
    multi-node serving) and is started from its head node."""
    g = tp * pp * max(ep // tp, 1)  # GPUs of one replica: every attention-DP rank's
    base = vllm_serve(
        model, tp, pp, budget, max_batch, max_model_len, memory_utilization, dtype, kv_dtype, ep, extra
    )
    lines = []
    # replicas side by side in one node (0: a replica needs several nodes); no box known: all in one machine
    per_node = replicas if gpus_per_node is None else gpus_per_node // g
    for r in range(replicas):
        args = [*base, "--port", str(FIRST_PORT + (r % per_node if per_node else 0))]
        if per_node:
            node, slot = divmod(r, per_node)
            devices = ",".join(str(slot * g + i) for i in range(g))
            where = f"# replica {r + 1} of {replicas}, node {node + 1}\n"
            lines.append(where + f"CUDA_VISIBLE_DEVICES={devices} " + shlex.join(args))
        else:
            nodes = -(-g // gpus_per_node)  # type: ignore[operator]
            where = (
                f"# replica {r + 1} of {replicas}: {nodes} nodes in one Ray cluster, run on its head node\n"
            )
            lines.append(where + shlex.join([*args, "--distributed-executor-backend", "ray"]))
    return lines


# vLLM's KV connector for disaggregated prefill (docs.vllm.ai/en/stable/features/nixl_connector_usage.html):
# the same flag on prefill and decode instances (NixlConnector ignores kv_role; the proxy decides who
# prefills), and a NIXL side-channel port per worker, base + TP rank, so instances on one host need disjoint
# ranges.
KV_TRANSFER_CONFIG = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
NIXL_BASE_PORT = 5600
PREFILL_PORT, DECODE_PORT, PROXY_PORT = 8100, 8200, 8192
# vLLM's proxy for NixlConnector (it sends each request to a prefiller with max_tokens=1, then to a decoder
# that streams the answer); it ships in vLLM's source tree, not in the wheel.
PROXY = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"


def disagg_commands(spec, row) -> list[str]:
    """The lines that start a disaggregated plan row (one copy of its layout per node): each prefill and
    decode instance with the NixlConnector, then vLLM's proxy in front of them."""
    import re

    from simserve.deployment import Deployment
    from simserve.plan.disagg import _fitting_budgets

    pool = r"(\d+)xTP(\d+)(?:PP(\d+))?(?:EP(\d+))?"  # plan.disagg.pool_label
    m = re.match(rf"{pool}P\+{pool}D$", str(row["layout"]))
    x, tp_p, pp_p, ep_p, y, tp_d, pp_d, ep_d = (int(v or 1) for v in m.groups())
    decode = Deployment.create(
        spec.model,
        row["gpu"],
        tp_d,
        pp_d,
        row["node"],
        None,
        spec.memory_utilization,
        spec.max_len,
        spec.dtype,
        spec.kv_dtype,
        ep_d,
    )
    pools = (
        ("prefill", x, tp_p, pp_p, ep_p, int(row["budget"]), PREFILL_PORT),
        (
            "decode",
            y,
            tp_d,
            pp_d,
            ep_d,
            _fitting_budgets(decode, spec.budgets, spec.max_batch)[0],
            DECODE_PORT,
        ),
    )
    lines, gpu, ports = [], 0, {"prefill": [], "decode": []}
    for side, n, tp, pp, ep, budget, port in pools:
        base = vllm_serve(
            spec.model,
            tp,
            pp,
            budget,
            spec.max_batch,
            spec.max_len,
            spec.memory_utilization,
            spec.dtype,
            spec.kv_dtype,
            ep,
        )
        for i in range(n):
            devices = ",".join(str(gpu + k) for k in range(tp * pp))
            args = [*base, "--port", str(port + i), "--kv-transfer-config", KV_TRANSFER_CONFIG]
            lines.append(
                f"# {side} instance {i + 1} of {n}\nCUDA_VISIBLE_DEVICES={devices} "
                f"VLLM_NIXL_SIDE_CHANNEL_PORT={NIXL_BASE_PORT + gpu} " + shlex.join(args)
            )
            ports[side].append(str(port + i))
            gpu += tp * pp
    proxy = [
        "python",
        PROXY,
        "--port",
        str(PROXY_PORT),
        "--prefiller-hosts",
        *["localhost"] * x,
        "--prefiller-ports",
        *ports["prefill"],
        "--decoder-hosts",
        *["localhost"] * y,
        "--decoder-ports",
        *ports["decode"],
    ]
    lines.append("# vLLM's proxy (from vLLM's source tree): clients talk to its port\n" + shlex.join(proxy))
    return lines
