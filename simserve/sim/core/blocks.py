"""KV blocks (kvcache.BlockManager) and the pools' caches: vLLM's prefix cache and SGLang's radix cache.

The free-block count of a replica (`Rep.free`), the block arithmetic of state.ReplicaState and the mirror of
the reference's own PrefixCache / RadixCache objects (`_sync_radix`), which the core calls at the same
moments.
"""

from __future__ import annotations

import cython

if cython.compiled:
    from cython.cimports.simserve.sim.core.events import CoreEvents
    from cython.cimports.simserve.sim.core.rep import Rep
else:
    from .events import CoreEvents
    from .rep import Rep

from .consts import INV_KV_NEGATIVE, INV_KV_OVERFULL


@cython.cclass
class CoreBlocks(CoreEvents):
    """KV blocks: allocation, release and the block arithmetic of state.ReplicaState."""

    # -- KV blocks (kvcache.BlockManager) -------------------------------------------------------------------
    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _allocate(self, rep: Rep, n: cython.longlong) -> cython.void:
        if n < 0 or n > rep.free:
            self.error = INV_KV_NEGATIVE
        rep.free -= n

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _release(self, rep: Rep, n: cython.longlong) -> cython.void:
        if n < 0 or rep.free + n > rep.num_blocks:
            self.error = INV_KV_OVERFULL
        rep.free += n

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _can_allocate(self, rep: Rep, n: cython.longlong) -> cython.bint:
        return rep.free - n >= rep.watermark

    # -- a request's tokens and the blocks admitting it takes (state.ReplicaState) ---------------------------
    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _num_tokens(self, rid: cython.longlong) -> cython.longlong:
        return self.prompt[rid] + self.generated[rid]

    @cython.cfunc
    @cython.exceptval(check=False)  # NOTE: arithmetic only; no Python error to check for
    def _admission_blocks(self, rid: cython.longlong) -> cython.longlong:
        if not self.dynamic:
            return self.reserve
        return -(-self._num_tokens(rid) // self.block_size)

    @cython.cfunc
    @cython.exceptval(check=False)
    def _pages(self, tokens: cython.longlong) -> cython.longlong:
        return -(-tokens // self.block_size)

    @cython.cfunc
    def _sync_radix(self, rep: Rep) -> cython.void:
        if rep.radix is not None:
            rep.free = rep.radix.free
