"""The kernels of one layer at their per-GPU shard shapes: GEMMs, elementwise ops and attention, as timed
rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simserve.deployment import Deployment
from simserve.ops import attention_shape, linear_ops
from simserve.profiling.torch_timing import Timer


def linear_rows(torch: Any, dep: Deployment, tokens: list[int], timer: Timer, dtype: Any) -> list[dict]:
    F, rows = torch.nn.functional, []
    for op in linear_ops(dep):
        w = torch.randn(op.out_features, op.in_features, dtype=dtype, device=timer.device)
        x = torch.randn(max(tokens), op.in_features, dtype=dtype, device=timer.device)
        for t in tokens:
            xt = x[:t]
            rows.append(
                {"op": op.name, "tp": dep.tp, "num_tokens": t, **timer(lambda xt=xt, w=w: F.linear(xt, w))}
            )
        w = x = None  # free this op's tensors before the next op allocates its own
    return rows


def elementwise_rows(torch: Any, dep: Deployment, tokens: list[int], timer: Timer, dtype: Any) -> list[dict]:
    F, m, s = torch.nn.functional, dep.model, attention_shape(dep)
    n, dev = max(tokens), timer.device
    h = torch.randn(n, m.hidden, dtype=dtype, device=dev)
    res = torch.randn(n, m.hidden, dtype=dtype, device=dev)
    out = torch.empty(n, m.hidden, dtype=dtype, device=dev)
    weight, bias = (
        torch.ones(m.hidden, dtype=dtype, device=dev),
        torch.zeros(m.hidden, dtype=dtype, device=dev),
    )
    q = torch.randn(n, s.q_heads, s.head_dim, dtype=dtype, device=dev)
    k = torch.randn(n, s.kv_heads, s.head_dim, dtype=dtype, device=dev)
    angles = torch.arange(n, device=dev, dtype=torch.float32)[:, None] / 10000 ** (
        torch.arange(0, s.head_dim, 2, device=dev, dtype=torch.float32) / s.head_dim
    )
    cos, sin = angles.cos().to(dtype)[:, None, :], angles.sin().to(dtype)[:, None, :]
    ffn = m.ffn // dep.tp
    up = torch.randn(n, m.ffn_in_width // dep.tp, dtype=dtype, device=dev)

    def norm(t: int) -> Any:
        if m.norm == "rmsnorm":
            return F.rms_norm(h[:t], (m.hidden,), weight, 1e-5)
        return F.layer_norm(h[:t], (m.hidden,), weight, bias, 1e-5)

    def rope(x: Any, t: int) -> Any:
        """Neox-style rotary (Llama, Mistral) in eager torch: several kernels where vLLM runs one fused
        kernel."""
        half = s.head_dim // 2
        x1, x2 = x[:t, :, :half], x[:t, :, half:]
        c, sn = cos[:t], sin[:t]
        return torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1)

    def act(t: int) -> Any:
        if m.activation == "swiglu":
            return F.silu(up[:t, :ffn]) * up[:t, ffn:]
        return F.gelu(up[:t])

    fns: dict[str, Callable[[int], Any]] = {
        "attn_norm": norm,
        "mlp_norm": norm,
        "rotary": lambda t: (rope(q, t), rope(k, t)),
        "act": act,
        "residual_add": lambda t: torch.add(h[:t], res[:t], out=out[:t]),
    }
    return [
        {"op": op, "tp": dep.tp, "num_tokens": t, **timer(lambda f=f, t=t: f(t))}
        for op, f in fns.items()
        for t in tokens
    ]


class Attention:
    """Prefill chunks over a cached prefix and batched decode with GQA, through flash-attn or SDPA."""

    def __init__(self, torch: Any, dep: Deployment, dtype: Any, device: Any, capacity: int):
        self.torch, self.dtype, self.device = torch, dtype, device
        s = attention_shape(dep)
        self.hq, self.hkv, self.d = s.q_heads, s.kv_heads, s.head_dim
        self.window = dep.model.sliding_window
        self.capacity = capacity  # KV tokens (all sequences together) that fit in the preallocated cache
        self.k = torch.randn(capacity * self.hkv * self.d, dtype=dtype, device=device)
        self.v = torch.randn(capacity * self.hkv * self.d, dtype=dtype, device=device)
        self.flash = _flash_attn(torch, device)
        self.backend = f"flash-attn {self.flash.__version__}" if self.flash else "torch sdpa"

    def _kv(self, b: int, n: int, heads_first: bool) -> tuple[Any, Any]:
        shape = (b, self.hkv, n, self.d) if heads_first else (b, n, self.hkv, self.d)
        size = b * n * self.hkv * self.d
        return self.k[:size].view(shape), self.v[:size].view(shape)

    def fits(self, b: int, n: int) -> bool:
        return b * n <= self.capacity

    def prefill(self, chunk: int, prefix: int, q: Any = None) -> Callable[[], Any]:
        """One request's `chunk` new tokens after `prefix` cached ones; q is (1, chunk, heads, head_dim)."""
        torch, F = self.torch, self.torch.nn.functional
        from torch.nn.attention.bias import causal_lower_right

        if self.window and not self.flash:  # keys no query of the chunk can see are never read
            prefix = min(prefix, self.window)
        q = torch.randn(1, chunk, self.hq, self.d, dtype=self.dtype, device=self.device) if q is None else q
        if self.flash:
            k, v = self._kv(1, prefix + chunk, heads_first=False)
            window = (self.window, 0) if self.window else (-1, -1)
            return lambda: self.flash.flash_attn_func(q, k, v, causal=True, window_size=window)
        k, v = self._kv(1, prefix + chunk, heads_first=True)
        q = q.transpose(1, 2)
        # causal inside the chunk, full over the prefix: the mask is aligned to the bottom-right corner
        mask = causal_lower_right(chunk, prefix + chunk) if prefix else None
        gqa = self.hq != self.hkv
        if mask is None:
            return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    def decode(self, batch: int, kv_len: int, q: Any = None) -> Callable[[], Any]:
        """`batch` requests, one new token each, over `kv_len` cached tokens; q is (batch, 1, heads,
        head_dim)."""
        torch, F = self.torch, self.torch.nn.functional
        kv_len = min(kv_len, self.window) if self.window else kv_len
        q = torch.randn(batch, 1, self.hq, self.d, dtype=self.dtype, device=self.device) if q is None else q
        if self.flash:
            k, v = self._kv(batch, kv_len, heads_first=False)
            lens = torch.full((batch,), kv_len, dtype=torch.int32, device=self.device)
            return lambda: self.flash.flash_attn_with_kvcache(q, k, v, cache_seqlens=lens)
        k, v = self._kv(batch, kv_len, heads_first=True)
        # One query token per request and no mask: the query heads sharing a kv head are folded into that
        # head's query rows, (batch, kv heads, group, d), as decode kernels pack GQA; no head-expanding
        # fallback path (SDPA's math backend copies K and V once per query head) can be picked.
        q = q.reshape(batch, self.hkv, self.hq // self.hkv, self.d)
        return lambda: F.scaled_dot_product_attention(q, k, v).view(batch, self.hq, 1, self.d)


def _flash_attn(torch: Any, device: Any) -> Any:
    """flash-attn when importable on a GPU and it runs a tiny GQA call; otherwise None (SDPA is used)."""
    if device.type != "cuda":
        return None
    try:
        import flash_attn

        q = torch.randn(1, 4, 4, 64, dtype=torch.bfloat16, device=device)
        kv = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16, device=device)
        flash_attn.flash_attn_func(q, kv, kv, causal=True)
        return flash_attn
    except Exception:  # not installed, or built for another GPU/torch: SDPA is the portable path
        return None


def attention_rows(
    attn: Attention, tp: int, g: dict[str, list[int]], timer: Timer, max_model_len: int
) -> tuple[list[dict], int]:
    """Decode over batch × context and prefill over chunk × prefix; points whose KV does not fit are
    counted."""
    rows, skipped = [], 0
    for b in g["batches"]:
        for kv in g["kv"]:
            stats = _time_if_fits(attn, timer, b, kv, lambda b=b, kv=kv: attn.decode(b, kv))
            if stats is None:
                skipped += 1
                continue
            rows.append({"phase": "decode", "tp": tp, "batch_size": b, "chunk": 1, "kv_len": kv, **stats})
    for c in g["chunks"]:
        for p in g["prefixes"]:
            if c + p > max_model_len:
                continue
            stats = _time_if_fits(attn, timer, 1, p + c, lambda c=c, p=p: attn.prefill(c, p))
            if stats is None:
                skipped += 1
                continue
            rows.append({"phase": "prefill", "tp": tp, "batch_size": 1, "chunk": c, "kv_len": p, **stats})
    return rows, skipped


def _time_if_fits(attn: Attention, timer: Timer, b: int, n: int, call: Callable[[], Any]) -> dict | None:
    """The point's times, or None when its KV exceeds the preallocated cache or its kernel's workspace does
    not fit in what the GPU has left (the row is then absent and counted, never a partial profile)."""
    if not attn.fits(b, n):
        return None
    cuda = attn.torch.cuda
    try:
        return timer(call())
    except cuda.OutOfMemoryError:
        cuda.empty_cache()
        return None


def kv_capacity(torch: Any, device: Any, dep: Deployment, g: dict[str, list[int]], dtype: Any) -> int:
    """KV tokens to preallocate: the largest grid point, or what 80% of free GPU memory holds."""
    s = attention_shape(dep)
    needed = max(max(g["batches"]) * max(g["kv"]), max(g["chunks"]) + max(g["prefixes"]))
    if device.type != "cuda":
        return needed
    free, _ = torch.cuda.mem_get_info(device)
    per_token = 2 * s.kv_heads * s.head_dim * torch.tensor([], dtype=dtype).element_size()
    return min(needed, int(0.8 * free / per_token))
