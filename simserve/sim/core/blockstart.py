"""Does the next token start a new KV block? The core's source run uncompiled (SIMSERVE_CORE=python).

Compiled, the modules cimport blockstart.pxd's inline function of the same name and arithmetic instead (this
file is not compiled: see blockstart.pxd for why the test is a function there and not a method of CoreBlocks).
"""

from __future__ import annotations


def block_start(computed: int, block_mask: int, block_size: int) -> bool:
    if block_mask >= 0:  # NOTE: a mask, not a division: this runs for every decode of every batch
        return (computed & block_mask) == 0
    return computed % block_size == 0
