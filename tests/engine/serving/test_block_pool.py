"""The KV block pool under random grow / release / retire sequences."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.engine.serving import BlockPool

ops = st.lists(
    st.tuples(st.sampled_from(["grow", "release", "retire"]), st.integers(0, 5), st.integers(0, 30)), max_size=80
)


@settings(max_examples=200, deadline=None)
@given(num_blocks=st.integers(2, 20), block_size=st.integers(1, 4), scratch=st.integers(0, 19), ops=ops)
def test_blocks_are_never_shared_never_scratch_and_wait_for_their_steps(num_blocks, block_size, scratch, ops):
    pool = BlockPool(num_blocks, block_size, scratch=scratch % num_blocks)
    reusable_after, step = {}, 0  # block -> the step it waits for
    for op, seq, n in ops:
        if op == "grow":
            before = set(pool.table(seq))
            if not pool.can_grow(seq, n):
                with pytest.raises(MemoryError):
                    pool.grow(seq, n)
                continue
            table = pool.grow(seq, n)
            assert len(table) == max(len(before), pool.blocks_for(n))
            for b in set(table) - before:
                assert reusable_after.pop(b, -1) <= pool.retired, f"block {b} handed out before its step retired"
        elif op == "release":
            for b in pool.table(seq):
                reusable_after[b] = step + n % 3 - 1  # the last step that could write it: past, now or ahead
            pool.release(seq, after_step=step + n % 3 - 1)
        else:
            step += 1
            pool.retire(step - 1 - n % 2)
        owned = [b for t in pool.tables().values() for b in t]
        assert len(owned) == len(set(owned)) and pool.scratch not in owned
        assert len(owned) + pool.free_count + pool.pending_count == pool.capacity


def test_a_table_covers_s_plus_w_positions():
    pool = BlockPool(num_blocks=10, block_size=4)
    assert len(pool.grow(0, positions=5 + 3)) == 2  # S = 5 tokens, W = 3 ahead
    assert len(pool.grow(0, positions=6 + 3)) == 3
    assert pool.missing(0, 9) == 0 and pool.missing(0, 13) == 1


def test_a_release_after_a_retired_step_frees_at_once():
    pool = BlockPool(num_blocks=4, block_size=2)
    pool.grow("a", 6)
    pool.retire(3)
    pool.release("a", after_step=3)
    assert pool.free_count == 3 and pool.pending_count == 0


def test_bad_pools_are_refused():
    with pytest.raises(ValueError):
        BlockPool(1, 4)
    with pytest.raises(ValueError):
        BlockPool(4, 4, scratch=4)
