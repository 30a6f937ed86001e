"""Replaying an allocation log through the CUDA caching allocator's rules.

``torch.cuda.max_memory_allocated`` counts the *blocks* the caching allocator hands out, not
the bytes asked for: a request is rounded up to 512 bytes; requests up to 1 MiB come from
2 MiB segments (the small pool), larger ones from 20 MiB segments (up to 10 MiB) or from
segments rounded up to 2 MiB; a free cached block is reused best-fit and split only when
what remains is at least 512 bytes (small pool) or more than 1 MiB (large pool) — an
unsplit block counts whole. `CachingAllocator` follows these rules
(``c10/cuda/CUDACachingAllocator.cpp``: ``round_size``, ``get_allocation_size``,
``get_free_block``, ``should_split``; one stream, no ``max_split_size_mb``, no expandable
segments), so the replayed peak is the number PyTorch reports, not just the sum of tensors.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from torchinspect.memory.constants import value

MIN_BLOCK = value("allocator.min_block")
SMALL_SIZE = value("allocator.small_size")  # requests up to 1 MiB use the small pool
SMALL_BUFFER = value("allocator.small_buffer")  # small-pool segment
LARGE_BUFFER = value("allocator.large_buffer")  # segment for requests under 10 MiB
MIN_LARGE_ALLOC = value("allocator.min_large_alloc")
ROUND_LARGE = value("allocator.round_large")


def round_size(nbytes: int) -> int:
    """A request rounded as the allocator rounds it (512-byte multiples, at least 512)."""
    if nbytes < MIN_BLOCK:
        return MIN_BLOCK
    return MIN_BLOCK * ((nbytes + MIN_BLOCK - 1) // MIN_BLOCK)


def segment_size(rounded: int) -> int:
    """The cudaMalloc size for a request that no cached block can serve."""
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * ((rounded + ROUND_LARGE - 1) // ROUND_LARGE)


@dataclass
class _Block:
    addr: int
    size: int
    small: bool
    free: bool = True
    prev: _Block | None = None
    next: _Block | None = None


@dataclass
class CachingAllocator:
    """A model of one device's caching allocator: ``allocated`` is what PyTorch reports."""

    allocated: int = 0
    reserved: int = 0
    _pools: dict[bool, list[tuple[int, int]]] = field(default_factory=lambda: {True: [], False: []})
    _blocks: dict[int, _Block] = field(default_factory=dict)  # addr -> block (free or not)
    _top: int = 0

    def malloc(self, nbytes: int) -> int:
        """Allocate; returns the block's address (its key for `free`)."""
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        pool = self._pools[small]
        i = bisect.bisect_left(pool, (size, -1))
        if i < len(pool):
            _, addr = pool.pop(i)
            block = self._blocks[addr]
        else:
            block = self._segment(segment_size(size), small)
        remaining = block.size - size
        if (remaining >= MIN_BLOCK) if small else (remaining > SMALL_SIZE):
            rest = _Block(block.addr + size, remaining, small, True, block, block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._blocks[rest.addr] = rest
            bisect.insort(self._pools[small], (rest.size, rest.addr))
        block.free = False
        self.allocated += block.size
        return block.addr

    def free(self, addr: int) -> None:
        block = self._blocks[addr]
        block.free = True
        self.allocated -= block.size
        pool = self._pools[block.small]
        for other in (block.prev, block.next):
            if other is not None and other.free:
                pool.pop(bisect.bisect_left(pool, (other.size, other.addr)))
                block = self._merge(block, other)
        bisect.insort(pool, (block.size, block.addr))

    def size_of(self, addr: int) -> int:
        """The size of the block at ``addr`` (what the allocated counter holds for it)."""
        return self._blocks[addr].size

    def _segment(self, size: int, small: bool) -> _Block:
        block = _Block(self._top, size, small)
        self._top += size + ROUND_LARGE  # segments never touch: blocks merge only inside one
        self._blocks[block.addr] = block
        self.reserved += size
        return block

    def _merge(self, a: _Block, b: _Block) -> _Block:
        first, second = (a, b) if a.addr < b.addr else (b, a)
        first.size += second.size
        first.next = second.next
        if second.next is not None:
            second.next.prev = first
        del self._blocks[second.addr]
        return first


class SumOfRounded:
    """Each request on its own, rounded to 512 bytes (``rounding=False``: exact bytes, as the
    CPU allocator counts them); no block reuse effects."""

    def __init__(self, rounding: bool = True) -> None:
        self.allocated = 0
        self.rounding = rounding
        self._sizes: dict[int, int] = {}
        self._n = 0

    def malloc(self, nbytes: int) -> int:
        self._n += 1
        self._sizes[self._n] = round_size(nbytes) if self.rounding else nbytes
        self.allocated += self._sizes[self._n]
        return self._n

    def size_of(self, addr: int) -> int:
        return self._sizes[addr]

    def free(self, addr: int) -> None:
        self.allocated -= self._sizes.pop(addr)
