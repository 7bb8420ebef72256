"""The device guard's kernel family, ``spec_verify_guard_check`` (docs/kernels.md).

The runtime's device guard (``runtime/device_guard.py``) launches it beside the
draft: one thread per sequence writes the sequence's failed conditions as
bits and ORs them into the runtime's sticky flag (``guard_flag``), so the
whole check is one launch.  No plan step launches it, so it is
a companion of the heads' plans: a build makes it wherever it makes one.
Importing ``specgen.specializations`` registers it.
"""

from __future__ import annotations

from .families import COMPANIONS, ArgSpec, Family, register

__all__ = [
    "ACCEPTED_AT",
    "ACCEPTED_BIT",
    "ENTRY_BIT",
    "GUARD_BITS",
    "GUARD_CHECK",
    "GUARD_PARAMS",
    "GUARD_SLOTS",
    "REACH_AT",
    "SCRATCH_AT",
    "SCRATCH_BIT",
]

GUARD_CHECK = "spec_verify_guard_check"
# ``guard_params``: GUARD_SLOTS lower length bounds, as many upper ones, then the block reach, the scratch
# block and the largest accepted count; bit GUARD_SLOTS + k of ``guard_bits[b]`` is GUARD_BITS[k]
GUARD_SLOTS = 8
GUARD_PARAMS = 2 * GUARD_SLOTS + 3
GUARD_BITS = ("block_table_entry", "accepted_range", "scratch_block_mapped")
# the one statement of that layout, which the template, the reference and the runtime read
REACH_AT, SCRATCH_AT, ACCEPTED_AT = range(2 * GUARD_SLOTS, GUARD_PARAMS)
ENTRY_BIT, ACCEPTED_BIT, SCRATCH_BIT = range(GUARD_SLOTS, GUARD_SLOTS + len(GUARD_BITS))

register(
    Family(
        GUARD_CHECK,
        ("W", "BT", "BS"),
        (
            ArgSpec("seq_lens", "int32", "(B,)"),
            ArgSpec("block_table", "int32", "(B, BT)"),
            ArgSpec("accepted", "int32", "(B,)"),
            ArgSpec("guard_params", "int32", f"({GUARD_PARAMS},)"),
            ArgSpec("guard_bits", "int32", "(B,)", True),
            ArgSpec("guard_flag", "int32", "(1,)", True),  # read and ORed into: the runtime's sticky flag
        ),
        guards=(),  # the checker runs on whatever a step holds: every input is in its domain
    )
)
for head in ("draft-to-verify", "draft-to-verify-linear"):
    COMPANIONS[head] = (*COMPANIONS.get(head, ()), GUARD_CHECK)
