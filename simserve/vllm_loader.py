"""What vLLM 0.33.0 refuses to load: the checks its model loader makes on a deployment's shapes, before
serving.

A deployment simserve can simulate may still be one the pinned engine will not start: `run`, `sweep` and
`plan` refuse those in one line (exit 2; the planner lists them under `rejected` and does not search them),
naming the check and where it lives in vLLM 0.33.0's source (paths under vllm/ in the release's wheel):

* KV heads and TP: each model's attention (`LlamaAttention.__init__`, vllm/model_executor/models/llama.py
  lines 151-155; the same lines in qwen2.py 144-148, qwen3.py 94-98, qwen3_moe.py 271-275, mixtral.py 166-170,
  deepseek_v2.py 174-178) asserts `total_num_kv_heads % tp_size == 0` when there are at least as many KV heads
  as TP ranks, else `tp_size % total_num_kv_heads == 0` (each rank then keeps a replica of one head). The
  query heads must divide by TP too (`ModelConfig.verify_with_parallel_config`, vllm/config/model.py line
  1559): the Deployment already refuses that, by the same rule.
* Experts and TP: `Qwen3MoeSparseMoeBlock.__init__` (vllm/model_executor/models/qwen3_moe.py lines 154-158)
  raises "Tensor parallel size … is greater than the number of experts …".
* Block-quantized fp8 checkpoints (`quantization_config.weight_block_size`, e.g. [128, 128] in Qwen's and
  DeepSeek's -FP8 releases). Linear layers: `validate_fp8_block_shape`
  (vllm/model_executor/layers/quantization/utils/fp8_utils.py lines 1296-1344, called by
  `Fp8LinearMethod.create_weights`, quantization/fp8.py line 303): a row-parallel layer's input shard (o_proj,
  down_proj) must be a multiple of block_k, a single column-parallel layer's output shard (MLA's q_b_proj and
  kv_b_proj) of block_n; merged ones (QKV, gate_up) are let through (vllm/model_executor/layers/linear.py line
  562). So Qwen3-4B-FP8 at TP 8 is refused: its down_proj shard is 9728 / 8 = 1216 wide. Fused MoE experts:
  the TP shard of an expert's intermediate width must be a multiple of block_n (and of block_k with TP > 1),
  else vLLM refines the checkpoint's scales to a finer square block, gcd(block_n, block_k, shard, hidden),
  when that is at least 32 (`refine_fp8_moe_block_shape`, vllm/model_executor/layers/fused_moe/oracle/ fp8.py
  lines 292-321, with the default `--moe-backend auto`), which only the Triton MoE kernels run; below 32
  `validate_fp8_block_shape_moe` (fp8_utils.py lines 1347-1372) refuses it. So Qwen3-235B-A22B-FP8 at TP 8
  without expert parallelism (1536 / 8 = 192 wide shards) loads, with 64 x 64 scales on Triton kernels; at TP
  32 (48-wide shards) it would not. Online fp8 (`--quantization fp8` on a bf16 checkpoint, what simserve's
  catalog models with `--dtype fp8` print) quantizes per tensor: no block constraint.
"""

from __future__ import annotations

from math import gcd

from simserve.deployment import Deployment
from simserve.errors import SimserveError

RELEASE = "vLLM 0.33.0"
MIN_REFINED_BLOCK = 32  # refine_fp8_moe_block_shape: "When a finer block size (>= 32) divides …"
_FP8_LINEAR = "vllm/model_executor/layers/quantization/utils/fp8_utils.py:1296 validate_fp8_block_shape"
_FP8_MOE = "vllm/model_executor/layers/quantization/utils/fp8_utils.py:1347 validate_fp8_block_shape_moe"


def refusal(dep: Deployment) -> str | None:
    """Why vLLM 0.33.0 would refuse to load `dep` (its message and where it comes from), or None."""
    m, tp = dep.model, dep.tp
    kv = m.num_kv_heads
    if not m.is_mla and tp > 1 and (kv % tp if kv >= tp else tp % kv):
        return (
            f"{RELEASE} cannot split {m.name}'s {kv} KV heads over TP {tp} (it needs TP to divide them or be "
            "a multiple of them: vllm/model_executor/models/llama.py:151 LlamaAttention, the same in every "
            "model)"
        )
    if m.is_moe and m.name.lower().startswith("qwen3") and tp > m.num_experts:
        return (
            f"{RELEASE}: Tensor parallel size {tp} is greater than the number of experts {m.num_experts} "
            f"(vllm/model_executor/models/qwen3_moe.py:154)"
        )
    block = getattr(m, "fp8_weight_block", None)
    if block is None or dep.dtype != "fp8":
        return None
    return _fp8_linear(dep, block) or _fp8_moe(dep, block)


def check(dep: Deployment) -> None:
    """Raise SimserveError (one line, with the fix) when vLLM 0.33.0 would refuse `dep`."""
    why = refusal(dep)
    if why:
        raise SimserveError(why if "; " in why else f"{why}; pick another --tp")


def _fp8_linear(dep: Deployment, block: tuple[int, int]) -> str | None:
    """validate_fp8_block_shape over the TP-split linear layers of one decoder layer. A merged column-parallel
    layer (QKV, gate_up: two or more output shards) whose shard misses block_n is let through
    (`ColumnParallelLinear._maybe_allow_fp8_block_shape_mismatch`, vllm/model_executor/layers/linear.py line
    562); a row-parallel layer's input shard and a single column-parallel output shard are checked."""
    m, tp = dep.model, dep.tp
    if tp == 1:
        return None  # nothing is split (validate_fp8_block_shape checks TP shards)
    n, k = block
    rows: list[tuple[str, int]] = []  # row-parallel layers: (name, input shard)
    columns: list[tuple[str, int]] = []  # single-output column-parallel layers: (name, output shard)
    if m.is_mla:
        heads = m.num_heads // tp
        columns += [
            ("q_b_proj" if m.q_lora_rank else "q_proj", heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)),
            ("kv_b_proj", heads * (m.qk_nope_head_dim + m.v_head_dim)),
        ]
        rows.append(("o_proj", heads * m.v_head_dim))
    else:
        rows.append(("o_proj", m.num_heads // tp * m.head_dim))
    for width, what in ((m.ffn if m.dense_layers else 0, "mlp"), (m.shared_expert_ffn, "shared_experts")):
        if width:
            rows.append((f"{what}.down_proj", width // tp))
    for name, shard in rows:
        if shard % k:
            return (
                f"{RELEASE} refuses {m.name}'s fp8 {n}x{k} weight blocks at TP {tp}: {name}: Weight "
                f"input_size_per_partition = {shard} is not divisible by weight quantization block_k = {k} "
                f"({_FP8_LINEAR})"
            )
    for name, shard in columns:
        if shard % n:
            return (
                f"{RELEASE} refuses {m.name}'s fp8 {n}x{k} weight blocks at TP {tp}: {name}: Weight "
                f"output_partition_size = {shard} is not divisible by weight quantization block_n = {n} "
                f"({_FP8_LINEAR})"
            )
    return None


def moe_shard(dep: Deployment) -> int:
    """An expert's intermediate width on one GPU: whole under expert parallelism, else split over TP."""
    return dep.model.expert_ffn // dep.expert_tp


def _fp8_moe(dep: Deployment, block: tuple[int, int]) -> str | None:
    """validate_fp8_block_shape_moe, after refine_fp8_moe_block_shape (module docstring)."""
    m = dep.model
    if not m.is_moe:
        return None
    n, k = block
    shard, moe_tp = moe_shard(dep), dep.expert_tp
    if shard % n == 0 and (moe_tp == 1 or shard % k == 0):
        return None
    if gcd(gcd(n, k), gcd(shard, m.hidden)) >= MIN_REFINED_BLOCK:
        return None  # refined scales, Triton MoE kernels
    which = f"block_n = {n}" if shard % n else f"block_k = {k}"
    where = f"at TP {dep.tp} without expert parallelism" if moe_tp > 1 else "even with whole experts per GPU"
    fix = f"; add --ep {dep.tp} (whole experts per GPU)" if moe_tp > 1 and m.expert_ffn % n == 0 else ""
    return (
        f"{RELEASE} refuses {m.name}'s fp8 {n}x{k} expert weights {where}: each GPU's {shard}-wide expert "
        f"shard is not divisible by weight quantization {which}, and no block of at least "
        f"{MIN_REFINED_BLOCK} divides both ({_FP8_MOE}){fix}"
    )
