"""The Gated DeltaNet layer's Triton kernels against its torch recurrence, case by case.

Run as a script (``python gdn_cases.py DEVICE DTYPE [SHAPE [TILE]]``; TILE ``16`` or
``32`` forces the delta rule's row-by-row kernel with that value tile, ``wy`` its
chunked matrix form, ``auto`` by default) so that the CPU
run can set ``TRITON_INTERPRET=1`` before Triton is imported; prints one JSON
object: per case, the largest error of the layer's output and of the whole
state pool (states and conv windows) after the forward, and whether slots
nobody names were left untouched.

Both layers share weights and start from the same random pool.  A case's
slots are what the engine passes (a verification: read the committed slot,
write one slot per row; a prefill with padding rows writing nowhere; plain
decoding writing the slot it reads) or hostile (slots out of range, negative,
huge): the kernels must treat any slot outside ``[0, num_slots)`` as -1
(read zeros, write nothing), so their result equals the torch path's on the
slots with those entries replaced by -1.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import torch

from specgen.models.gated_deltanet import GatedDeltaNet, LinearStatePool

SHAPES = {
    # key heads, value heads, key dim, value dim, hidden
    "tiny": (2, 4, 16, 8, 64),
    "odd": (1, 3, 24, 40, 48),  # dims that are no power of two: every mask is live
    "real": (16, 16, 128, 128, 2048),  # Qwen3.5-2B's linear layers
}
SLOTS = 12


def layer_pair(shape: str, dtype: torch.dtype, device: str, seed: int = 0):
    hk, hv, dk, dv, hidden = SHAPES[shape]
    cfg = SimpleNamespace(
        hidden_size=hidden,
        rms_eps=1e-6,
        linear_num_key_heads=hk,
        linear_num_value_heads=hv,
        linear_key_head_dim=dk,
        linear_value_head_dim=dv,
        linear_conv_kernel_dim=4,
    )
    torch.manual_seed(seed)
    ref = GatedDeltaNet(cfg).to(device=device, dtype=dtype)
    with torch.no_grad():
        for name, p in ref.named_parameters():
            if name == "A_log":
                p.copy_(torch.rand_like(p) * 2.7)
            elif name == "dt_bias":
                p.copy_(torch.randn_like(p))
            elif name == "norm.weight":
                p.copy_(1 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    fast = GatedDeltaNet(cfg).to(device=device, dtype=dtype)
    fast.load_state_dict(ref.state_dict())
    ref.kernels, fast.kernels = "torch", "triton"
    return ref.requires_grad_(False), fast.requires_grad_(False), cfg


def pools(cfg, dtype, device, seed: int):
    make = lambda: LinearStatePool(  # noqa: E731
        1,
        SLOTS,
        cfg.linear_num_value_heads,
        cfg.linear_key_head_dim,
        cfg.linear_value_head_dim,
        2 * cfg.linear_num_key_heads * cfg.linear_key_head_dim + cfg.linear_num_value_heads * cfg.linear_value_head_dim,
        4,
        dtype,
        device,
    )
    a, b = make(), make()
    gen = torch.Generator(device="cpu").manual_seed(seed)
    state = torch.randn(a._state.shape, generator=gen) * 0.3
    conv = torch.randn(a._conv.shape, generator=gen)
    for p in (a, b):
        p._state.copy_(state)
        p._conv.copy_(conv)
    return a, b


def sanitize(slots: torch.Tensor) -> torch.Tensor:
    return torch.where((slots >= 0) & (slots < SLOTS), slots, torch.full_like(slots, -1))


def run_case(ref, fast, cfg, dtype, device, batch: int, rows_per: int, read, write, seed: int) -> dict:
    n = batch * rows_per
    gen = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(n, cfg.hidden_size, generator=gen).to(device=device, dtype=dtype)
    rows = torch.arange(n, device=device).view(batch, rows_per)
    read = torch.tensor(read, dtype=torch.int32, device=device)
    write = torch.tensor(write, dtype=torch.int32, device=device)
    p_ref, p_fast = pools(cfg, dtype, device, seed)
    before = p_fast.snapshot()
    want = ref(x, rows, sanitize(read), sanitize(write), p_ref, 0)
    got = fast(x, rows, read, write, p_fast, 0)
    written = set(sanitize(write).tolist()) - {-1}
    untouched = all(
        torch.equal(p_fast._state[0, s], before[0][0, s]) and torch.equal(p_fast._conv[0, s], before[1][0, s])
        for s in range(SLOTS + 1)
        if s not in written
    )
    live = torch.tensor(sorted(written), dtype=torch.long, device=device)
    return {
        "err_out": (got.float() - want.float()).abs().max().item(),
        "scale_out": want.float().abs().max().item(),
        "err_state": (p_fast._state[0, live] - p_ref._state[0, live]).abs().max().item() if len(live) else 0.0,
        "err_conv": (p_fast._conv[0, live].float() - p_ref._conv[0, live].float()).abs().max().item()
        if len(live)
        else 0.0,
        "untouched": untouched,
        "finite": bool(torch.isfinite(got).all()),
    }


def cases(device: str, dtype: torch.dtype, shape: str) -> dict:
    ref, fast, cfg = layer_pair(shape, dtype, device)
    out = {}
    # a verification of W = 4 rows: read the committed slot (one sequence from the zero state), write row j's
    # state to the sequence's slot j
    out["verify_w4"] = run_case(ref, fast, cfg, dtype, device, 3, 4, [2, -1, 9], list(range(12)), 1)
    # batch of one, W = 6, reading a slot it also writes
    out["verify_b1_w6"] = run_case(ref, fast, cfg, dtype, device, 1, 6, [3], [0, 1, 2, 3, 4, 5], 2)
    # a prefill with padding: each prompt's last row writes, every other row nowhere
    write = [-1] * 14
    write[4], write[7 + 6] = 5, 11
    out["prefill_padded"] = run_case(ref, fast, cfg, dtype, device, 2, 7, [-1, -1], write, 3)
    # a long prefill (past the one-tile conv's 16 rows and the kernels' 8-row chunks), each prompt's last row
    # writing the slot it read, and the first row of a second chunk writing another (its window spans the chunks)
    write = [-1] * 40
    write[19], write[39] = 2, 7
    write[8], write[28] = 4, 9
    out["prefill_long_inplace"] = run_case(ref, fast, cfg, dtype, device, 2, 20, [2, 7], write, 7)
    # one sequence long enough that the launch takes the chunked matrix form (triton_gdn.takes_chunked), writing
    # after a row inside a chunk and, at its last row, the slot it read
    write = [-1] * 70
    write[37], write[69] = 6, 10
    # (ran_chunked: whether the layer's launch called the chunked form)
    from specgen.models import triton_gdn_wy

    chunked, calls = triton_gdn_wy.delta_rule_wy, []
    triton_gdn_wy.delta_rule_wy = lambda *a, **k: calls.append(1) or chunked(*a, **k)
    try:
        out["prefill_chunked_auto"] = run_case(ref, fast, cfg, dtype, device, 1, 70, [10], write, 9)
    finally:
        triton_gdn_wy.delta_rule_wy = chunked
    out["prefill_chunked_auto"]["ran_chunked"] = bool(calls)
    # two rows, fewer than the conv's window: the last row's window keeps old entries while it is written in place
    out["short_inplace"] = run_case(ref, fast, cfg, dtype, device, 2, 2, [3, 8], [-1, 3, -1, 8], 8)
    # plain decoding: one row per sequence, the state written back into the slot it was read from
    out["decode_inplace"] = run_case(ref, fast, cfg, dtype, device, 4, 1, [0, 5, 11, 7], [0, 5, 11, 7], 4)
    # the largest batch the pool holds at W = 1: every slot read and written back in place
    out["largest_batch"] = run_case(ref, fast, cfg, dtype, device, SLOTS, 1, list(range(SLOTS)), list(range(SLOTS)), 5)
    # hostile slots: past the pool, far past it, below -1 (read as zeros, written nowhere)
    out["hostile"] = run_case(
        ref,
        fast,
        cfg,
        dtype,
        device,
        3,
        3,
        [SLOTS, -(2**31), 2**31 - 1],
        [SLOTS, -7, 3, 2**31 - 1, 1, -(2**31), 4, SLOTS + 1, 8],
        6,
    )
    return out


def force_tile(tile: str) -> None:
    """``16`` or ``32``: every launch of the delta rule takes the row-by-row kernel with that value tile (wider
    than a tiny head's values: masked lanes); ``wy``: every launch takes the chunked matrix form; ``auto`` leaves
    the choice to the launch."""
    from specgen.models import triton_gdn

    if tile in ("wy", "wy4"):  # wy4: at 4 warps, as a launch past one wave of programs takes it
        triton_gdn.CHUNKED_FROM_ROWS, triton_gdn.CHUNKED_MAX_PROGRAMS = 1, 2**62
        if tile == "wy4":
            triton_gdn._chunked_warps = lambda *_: 4
    elif tile in ("16", "32"):
        triton_gdn.CHUNKED_FROM_ROWS = None
        triton_gdn._values_per_program = lambda *_: int(tile)
    elif tile != "auto":
        raise ValueError(f"tile {tile!r}: expected 16, 32, wy, wy4 or auto")


if __name__ == "__main__":
    device, dtype = sys.argv[1], getattr(torch, sys.argv[2])
    shape = sys.argv[3] if len(sys.argv) > 3 else "tiny"
    force_tile(sys.argv[4] if len(sys.argv) > 4 else "auto")
    print(json.dumps(cases(device, dtype, shape)))
