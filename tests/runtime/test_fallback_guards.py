"""The fast-path decision evaluates the guards of every kernel of the step plan, not only the first one.

In a real build the kernels' guards differ: at width 4, bt 8, bs 16 the head
update admits ``max_seq_len <= 124`` (``S + W <= BT * BS``) while
``prepare_next_draft``, later in the plan, admits only ``<= 123`` (``S + W + 1
<= BT * BS``).  A step at length 124 must fall back on that very step
(``guard_failed``), not replay and leave it to the device guard to notice one
step late.
"""

from __future__ import annotations

import pytest
import torch

from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
from specgen.runtime.fallback import fallback_reason
from specgen.runtime.guards import check_guards
from specgen.runtime.step_plan import StepPlan, eager_step

W, BT, BS = 4, 8, 16
VOCAB = 50
I32 = torch.int32
ON = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=BS, block_table_width=BT)
BUCKETS = (1, 2, 4, 8)
FAMILIES = ("spec_verify_head_update", "greedy_prefix_verify", "prepare_next_draft")


class Guarded:
    """A kernel stand-in with one guard, ``max_seq_len <= limit``; records the buckets it was asked about."""

    def __init__(self, limit):
        self.limit, self.batches = limit, []

    def check_guards(self, *, min_seq_len, max_seq_len, batch):
        self.batches.append(batch)
        return check_guards(
            [(f"max_seq_len <= {self.limit}", "")], min_seq_len=min_seq_len, max_seq_len=max_seq_len, batch=batch
        )


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_the_failing_guard_of_any_kernel_decides(failing):
    kernels = {name: Guarded(100 if i == failing else 1000) for i, name in enumerate(FAMILIES)}
    plan = StepPlan(kv_layout=(BT, BS), kernels=kernels)
    assert fallback_reason(ON, plan, BUCKETS, 3, None, (0, 100)) is None
    assert [k.batches for k in kernels.values()] == [[4]] * 3  # every kernel was asked, about the bucket
    assert fallback_reason(ON, plan, BUCKETS, 3, None, (0, 101)) == "guard_failed"


@pytest.fixture(scope="module")
def lib(engine_kernels):
    """The session's engine build (tests/conftest.py): w4 bt8 bs16 among its layouts, int32 drafts."""
    return engine_kernels


def model_forward(bufs):
    """A deterministic stand-in for the target model: a function of each row's token and position."""
    tokens, positions = bufs["tokens"].long(), bufs["positions"].long()
    return ((tokens * 7 + positions) % VOCAB).to(I32).view(-1, W)


def step_inputs(seq_lens, seed=0):
    gen = torch.Generator().manual_seed(seed)
    B = len(seq_lens)
    last = torch.randint(0, VOCAB, (B,), generator=gen, dtype=I32)
    drafts = torch.randint(0, VOCAB, (B, W - 1), generator=gen, dtype=I32)
    table = torch.randint(1, 64, (B, BT), generator=gen, dtype=I32)
    return last, drafts, torch.tensor(seq_lens, dtype=I32), table


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:SpecVerifyRuntime.*left the fast path:RuntimeWarning")
def test_a_later_kernels_guard_sends_the_step_to_the_fallback_at_once(lib):
    from specgen.runtime.verify_graph import SpecVerifyRuntime

    rt = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=4)
    top = BT * BS - W  # the head update's largest length; one past prepare_next_draft's
    kernels = list(rt.step_plan.kernels.values())
    assert kernels[0].check_guards(min_seq_len=3, max_seq_len=top, batch=2).ok
    assert not all(k.check_guards(min_seq_len=3, max_seq_len=top, batch=2).ok for k in kernels[1:])

    last, drafts, seq_lens, table = step_inputs([top, 3])
    res = rt.step(last, drafts, seq_lens, table)
    assert not res.fast_path and res.reason == "guard_failed"
    assert rt.stats() == {"fast_path": 0, "fallback": {"guard_failed": 1}, "device_guard": {}}
    want = eager_step(model_forward, W, BS, rt.num_splits, last, drafts, seq_lens, table)
    assert torch.equal(res.accepted, want["accepted"]) and torch.equal(res.next_tokens, want["next_tokens"])

    # one below: every kernel's guards hold, and nothing was left for the device guard to report
    last, drafts, seq_lens, table = step_inputs([top - 1, 3], seed=1)
    res = rt.step(last, drafts, seq_lens, table)
    assert res.fast_path
    assert rt.stats() == {"fast_path": 1, "fallback": {"guard_failed": 1}, "device_guard": {}}
    want = eager_step(model_forward, W, BS, rt.num_splits, last, drafts, seq_lens, table)
    assert torch.equal(res.accepted, want["accepted"]) and torch.equal(res.next_tokens, want["next_tokens"])
