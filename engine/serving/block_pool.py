"""The KV block pool of the serving loop: block tables that grow, and releases that wait for steps in flight.

A speculative step writes up to ``W`` (the verify width) positions past a
sequence's ``S`` tokens, so a table covers ``S + W`` positions before the step
runs.  A finished or preempted sequence may still be written by a step already
launched, so its blocks come back only once every such step has completed::

    >>> pool = BlockPool(num_blocks=5, block_size=4)      # block 0 is the scratch block
    >>> pool.grow(7, positions=9)                          # 9 positions: 3 blocks
    (1, 2, 3)
    >>> pool.release(7, after_step=12); pool.free_count    # step 12 may still write them
    1
    >>> pool.retire(12); pool.free_count
    4
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["BlockPool"]


@dataclass(slots=True)
class BlockPool:
    """``num_blocks`` KV blocks of ``block_size`` positions; ``scratch`` is never handed out.

    ``retired`` is the newest step known complete (with every step before it);
    ``release(seq, after_step=k)`` with ``k <= retired`` frees at once.
    """

    num_blocks: int
    block_size: int
    scratch: int = 0
    retired: int = -1
    _free: deque = field(default_factory=deque, repr=False)
    _tables: dict = field(default_factory=dict, repr=False)
    _pending: list = field(default_factory=list, repr=False)  # (after_step, blocks)

    def __post_init__(self):
        if self.num_blocks < 2 or self.block_size < 1:
            raise ValueError(f"a pool needs >= 2 blocks of >= 1 position, got {self.num_blocks} x {self.block_size}")
        if not 0 <= self.scratch < self.num_blocks:
            raise ValueError(f"scratch block {self.scratch} outside 0..{self.num_blocks - 1}")
        self._free = deque(b for b in range(self.num_blocks) if b != self.scratch)

    @property
    def capacity(self) -> int:
        """Blocks a sequence may ever own: all but the scratch block."""
        return self.num_blocks - 1

    @property
    def free_count(self) -> int:
        return len(self._free)

    @property
    def pending_count(self) -> int:
        """Blocks released but not yet reusable (a step that could write them is in flight)."""
        return sum(len(blocks) for _, blocks in self._pending)

    def blocks_for(self, positions: int) -> int:
        """Blocks that cover ``positions`` positions."""
        return -(-int(positions) // self.block_size)

    def table(self, seq) -> tuple[int, ...]:
        """``seq``'s block table (empty if it owns none)."""
        return tuple(self._tables.get(seq, ()))

    def tables(self) -> dict:
        """Every live table, by sequence."""
        return {seq: tuple(t) for seq, t in self._tables.items()}

    def missing(self, seq, positions: int) -> int:
        """Blocks ``seq`` still needs to cover ``positions`` positions."""
        return max(0, self.blocks_for(positions) - len(self._tables.get(seq, ())))

    def can_grow(self, seq, positions: int) -> bool:
        return self.missing(seq, positions) <= len(self._free)

    def grow(self, seq, positions: int) -> tuple[int, ...]:
        """Grow ``seq``'s table to cover ``positions`` positions; returns the whole table."""
        need = self.missing(seq, positions)
        if need > len(self._free):
            raise MemoryError(f"sequence {seq} needs {need} more blocks, {len(self._free)} free")
        table = self._tables.setdefault(seq, [])
        table.extend(self._free.popleft() for _ in range(need))
        return tuple(table)

    def release(self, seq, after_step: int) -> None:
        """Give ``seq``'s blocks back once step ``after_step`` (the last that could write them) completed."""
        blocks = self._tables.pop(seq, [])
        if not blocks:
            return
        if after_step <= self.retired:
            self._free.extend(blocks)
        else:
            self._pending.append((int(after_step), blocks))

    def retire(self, step: int) -> None:
        """Step ``step`` and every step before it completed: blocks waiting on them become free."""
        self.retired = max(self.retired, int(step))
        keep = []
        for after, blocks in self._pending:
            if after <= self.retired:
                self._free.extend(blocks)
            else:
                keep.append((after, blocks))
        self._pending = keep
