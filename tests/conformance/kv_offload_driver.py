"""Replays a recorded CPU-tier call sequence on vLLM 0.33.0's own CPUOffloadingManager (LRU policy).

Run with vLLM's interpreter: JSON in on stdin ({"capacity": chunks, "events": [...]}, as
test_kv_offload_conformance.py records them from simserve's tier), JSON out on stdout: per event, what the
manager decided (the keys a store evicted, or null when it refused the store; a lookup's consecutive hits).
"""

from __future__ import annotations

import json
import sys

from vllm.v1.kv_offload.base import LookupResult, ReqContext, make_offload_key
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager


def _key(k: int):
    return make_offload_key(k.to_bytes(16, "big", signed=True), 0)


def main() -> None:
    w = json.load(sys.stdin)
    mgr = CPUOffloadingManager(num_chunks=w["capacity"], cache_policy="lru", store_threshold=0)
    ctx: dict[int, ReqContext] = {}
    bs = w["block_size"]

    def context(rid: int, pairs) -> ReqContext:
        c = ctx.get(rid)
        if c is None:
            c = ctx[rid] = ReqContext(req_id=str(rid))
            mgr.on_new_request(c)
        for k, pos in pairs:  # the scheduler records each key's end token in its request
            c.set_offload_key_position(_key(k), (pos + 1) * bs)
        return c

    out = []
    loading: set[int] = set()
    for ev in w["events"]:
        kind, rid = ev[0], ev[1]
        if kind == "store":
            c = context(rid, ev[2])
            keys = [_key(k) for k, _ in ev[2]]
            res = mgr.prepare_store(keys, c)
            if res is None:
                out.append(None)
                continue
            mgr.complete_store(res.keys_to_store, c)  # simserve: a store is readable at once
            out.append(
                sorted(int.from_bytes(bytes(e)[:-4], "big", signed=True) for e in res.evicted_keys)
                if res.evicted_keys
                else []
            )
        elif kind == "lookup":
            c = context(rid, [])
            n = 0
            for k in ev[2]:
                if mgr.lookup(_key(k), c) is LookupResult.MISS:
                    break
                n += 1
            out.append(n)
        elif kind == "load":
            c = context(rid, ev[2])
            keys = [_key(k) for k, _ in ev[2]]
            if any(mgr.lookup(k, c) is not LookupResult.HIT for k in keys):
                out.append("not resident")  # simserve loads what vLLM no longer holds: a divergence
                loading.discard(rid)
                continue
            mgr.prepare_load(keys, c)
            loading.add(rid)
            out.append(0)
        elif kind == "loaded":
            if rid in loading:
                mgr.complete_load([_key(k) for k in ev[2]], ctx[rid])
                loading.discard(rid)
            out.append(0)
        elif kind == "finished":
            if rid in ctx:
                mgr.on_request_finished(ctx.pop(rid))
            out.append(0)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
