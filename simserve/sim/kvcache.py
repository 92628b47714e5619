"""Paged KV cache of one replica: a count of free blocks, with the admission watermark.

Sarathi-Serve's block managers, reduced to what scheduling sees: `can_allocate` keeps a watermark of free
blocks (1% of the pool for vLLM/Sarathi, none for Orca/FCFS), `can_append_slot` needs one free block.
Which physical block holds what does not matter to timing, so only counts are kept; the per-request count
lives in `Requests.blocks`.
"""

from __future__ import annotations


class BlockManager:
    def __init__(self, num_blocks: int, watermark_fraction: float = 0.01):
        if num_blocks < 1:
            raise ValueError(f"a KV cache needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.free = num_blocks
        self.watermark = int(watermark_fraction * num_blocks)

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    def can_allocate(self, blocks: int) -> bool:
        return self.free - blocks >= self.watermark

    def can_append_slot(self) -> bool:
        # NOTE: checked before every decode, even one that needs no new block (Sarathi-Serve does the same).
        return self.free > 0

    def allocate(self, blocks: int) -> None:
        assert 0 <= blocks <= self.free, f"allocating {blocks} KV blocks with {self.free} free"
        self.free -= blocks

    def release(self, blocks: int) -> None:
        assert blocks >= 0 and self.free + blocks <= self.num_blocks, (
            f"releasing {blocks} KV blocks with {self.free} of {self.num_blocks} free"
        )
        self.free += blocks
