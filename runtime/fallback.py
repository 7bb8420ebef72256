"""Whether a verify step may take the captured (fast) path, and if not, why.

The fast path runs only when the model supports in-graph input updates, every
variant of the step plan is built for the device's target, the batch fits a
bucket, the model's block layout equals the plan's, and every guard of every
built variant holds for the step's sequence-length bounds.  Otherwise
``fallback_reason`` names the first condition that failed (one of
``FALLBACK_REASONS``) and the step runs the families' torch semantics (eager).
The last reason, ``device_guard_trip``, is not decided here: it is the
device-side guard's verdict on an earlier step (``runtime/device_guard.py``),
which the runtime applies when every condition here holds.
"""

from __future__ import annotations

import torch

from ..specializations.capabilities import SpeculativeVerifyCapabilities
from ..specializations.targets import TARGET_OF_DEVICE
from ..specializations.variants import Layout
from .buffers import bucket_of
from .step_plan import StepPlan, plan_build_command

__all__ = [
    "FALLBACK_REASONS",
    "FastPathUnavailable",
    "fallback_reason",
    "scratch_in_table",
    "seq_len_bounds",
    "unavailable_message",
]

FALLBACK_REASONS = (
    "capability_off",
    "variant_not_built",
    "layout_mismatch",
    "batch_exceeds_buckets",
    "empty_batch",
    "guard_failed",
    "device_guard_trip",
)


def fallback_reason(
    caps: SpeculativeVerifyCapabilities,
    plan: StepPlan,
    buckets: tuple[int, ...],
    batch: int,
    block_table: torch.Tensor | None,
    bounds: tuple[int, int],
) -> str | None:
    """Why ``batch`` rows with ``block_table`` and sequence lengths in ``bounds`` cannot replay; None if they can."""
    if not caps.supports_in_graph_input_update:
        return "capability_off"
    if plan.unavailable is not None:
        return plan.unavailable
    bt, bs = plan.kv_layout
    if (caps.block_size, caps.block_table_width) != (bs, bt) or (
        block_table is not None and block_table.shape[1] != bt
    ):
        return "layout_mismatch"
    if batch > buckets[-1]:
        return "batch_exceeds_buckets"
    bucket = bucket_of(buckets, batch)
    lo, hi = bounds
    for k in plan.kernels.values():
        if not k.check_guards(min_seq_len=lo, max_seq_len=hi, batch=bucket):
            return "guard_failed"
    return None


def seq_len_bounds(seq_lens: torch.Tensor, given: tuple[int, int] | None, on_host: bool) -> tuple[int, int]:
    """The smallest and largest sequence length of a step, for the guards.

    On the host (``on_host``) the data are read and widen ``given``; on a
    device ``given`` is trusted, since reading the data would synchronize
    (without ``given`` it is read all the same).
    """
    if seq_lens.numel() == 0:
        return given or (0, 0)
    if on_host or given is None:
        lo, hi = int(seq_lens.min()), int(seq_lens.max())
        if given is not None:
            lo, hi = min(lo, int(given[0])), max(hi, int(given[1]))
        return lo, hi
    return int(given[0]), int(given[1])


class FastPathUnavailable(LookupError):
    """A runtime that could never take the fast path was asked for one; the message says what is missing."""


def unavailable_message(
    caps: SpeculativeVerifyCapabilities, plan: StepPlan, width: int, device_type: str, tail: str, root=None
) -> str | None:
    """Why no step of this runtime can take the fast path, with what to do about it; None when steps can."""
    if not caps.supports_in_graph_input_update:
        return (
            f"no fast path for width {width}: the model does not opt in (its capabilities have "
            f"supports_in_graph_input_update=False; docs/integration.md says what opting in takes)"
        )
    if plan.unavailable is None:
        return None
    target = TARGET_OF_DEVICE[device_type]
    bt, bs = plan.kv_layout if plan.kv_layout is not None else (caps.block_table_width, caps.block_size)
    cmd = plan_build_command(Layout(width, bt, bs), target, tail, caps.has_linear_state)
    cmd += f" --out {root}" if root is not None else ""
    what = plan.missing or f"the plans and variants of width {width}"
    return f"no fast path for width {width}: the build lacks {what}; run `{cmd}`"


def scratch_in_table(
    block_table: torch.Tensor, seq_lens: torch.Tensor | None, width: int, block_size: int, scratch_block: int
) -> int | None:
    """The first row whose mapped entries (all entries without ``seq_lens``) hold ``scratch_block``; None if none."""
    hits = block_table == scratch_block
    if seq_lens is not None:
        needed = (seq_lens.long()[:, None] + width + block_size - 1) // block_size  # blocks of S .. S + W - 1
        hits &= torch.arange(block_table.shape[1], device=block_table.device)[None, :] < needed
    rows = hits.any(dim=1).nonzero()
    return int(rows[0, 0]) if rows.numel() else None


def refuse_scratch_in_table(
    block_table: torch.Tensor, seq_lens: torch.Tensor | None, width: int, block_size: int, scratch_block: int
) -> None:
    """``ValueError`` when a row of ``block_table`` maps the scratch block (see ``scratch_in_table``)."""
    row = scratch_in_table(block_table, seq_lens, width, block_size, scratch_block)
    if row is not None:
        raise ValueError(
            f"block table row {row} maps the scratch block {scratch_block}, which padding rows and "
            f"rejected repair writes use; give the runtime a scratch_block no sequence owns"
        )
