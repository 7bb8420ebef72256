"""The delta rule's chunked matrix form (``models/triton_gdn_wy.py``) and its row-by-row form (``triton_gdn``'s kernel)
against a float64 recurrence, on inputs that make the chunk's triangular solve hard.

Run as a script (``python gdn_chunked_cases.py DEVICE``) so that the CPU run can set ``TRITON_INTERPRET=1`` first;
prints one JSON object: per case and form, the largest error of the outputs and of the written states (relative to
their largest magnitude) and whether slots nobody names were left untouched.

Cases: consecutive keys that nearly coincide with ``beta`` near 1 and almost no decay (the unit lower-triangular
matrix of a chunk far from the identity); strong decays (``e^L`` underflowing inside a chunk); gate inputs that
overflow (a decay of ``e^-inf``, which must clear the state, not turn it into NaN); a prefill of 77 rows
(chunks of 16 and a partial one) writing after a row inside a chunk, at a chunk's end and after its last row in
place of the slot it read; a verification writing every row.
"""

from __future__ import annotations

import json
import sys

import torch

HK, HV, DK, DV = 2, 4, 32, 24
C = 2 * HK * DK + HV * DV
SLOTS = 10


def reference(mixed, a_raw, b_raw, a_log, dt_bias, pool, rows, read, write):
    """The gated delta rule row by row in float64 (``gated_deltanet``'s semantics); the pool after it, the outputs."""
    b, r, _ = mixed.shape
    pool = pool.double().clone()
    out = torch.zeros(a_raw.shape[0], HV, DV, dtype=torch.float64)
    for s in range(b):
        h = pool[read[s]].clone() if 0 <= read[s] < SLOTS else torch.zeros(HV, DK, DV, dtype=torch.float64)
        for i in range(r):
            x = mixed[s, i].double()
            q = x[: HK * DK].view(HK, DK).repeat_interleave(HV // HK, 0)
            k = x[HK * DK : 2 * HK * DK].view(HK, DK).repeat_interleave(HV // HK, 0)
            v = x[2 * HK * DK :].view(HV, DV)
            q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * DK**-0.5
            k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
            n = int(rows[s, i])
            a = a_raw[n].double() + dt_bias.double()
            g = torch.exp(-torch.exp(a_log.double()) * torch.nn.functional.softplus(a))
            beta = torch.sigmoid(b_raw[n].double())
            h = h * g[:, None, None]
            kv = torch.einsum("hkv,hk->hv", h, k)
            h = h + k[:, :, None] * ((v - kv) * beta[:, None])[:, None, :]
            out[n] = torch.einsum("hkv,hk->hv", h, q)
            if 0 <= write[n] < SLOTS:
                pool[write[n]] = h
    return pool, out


def inputs(batch: int, rows_per: int, kind: str, seed: int) -> dict:
    g = torch.Generator(device="cpu").manual_seed(seed)
    n = batch * rows_per
    mixed = torch.randn(batch, rows_per, C, generator=g)
    a_log = torch.rand(HV, generator=g) * 2.7
    a_raw = torch.randn(n, HV, generator=g)
    b_raw = torch.randn(n, HV, generator=g)
    if kind == "near_keys":  # every row's keys a small step from the sequence's first: k_t . k_s near 1
        base = mixed[:, :1, HK * DK : 2 * HK * DK]
        mixed[:, :, HK * DK : 2 * HK * DK] = base + 0.02 * torch.randn(batch, rows_per, HK * DK, generator=g)
        a_log = torch.full((HV,), -9.0)  # decay e^(-e^-9 softplus(.)): almost none
        b_raw = b_raw.abs() + 6.0  # beta near 1
    elif kind == "strong_decay":
        a_log = torch.full((HV,), 3.0)
        a_raw = a_raw.abs() + 4.0
    elif kind == "overflowing_gate":  # a gate input of +inf: that row's decay e^-inf = 0 clears the state
        a_raw[3, 0] = float("inf")
        a_raw[21, 1] = 3e38
    return {
        "mixed": mixed,
        "a_raw": a_raw,
        "b_raw": b_raw,
        "a_log": a_log,
        "dt_bias": torch.randn(HV, generator=g),
        "pool": torch.randn(SLOTS + 1, HV, DK, DV, generator=g) * 0.3,
        "rows": torch.arange(n).view(batch, rows_per),
    }


def run(device: str, d: dict, read: list[int], write: list[int]) -> dict:
    from specgen.models import triton_gdn, triton_gdn_wy

    triton_gdn.CHUNKED_FROM_ROWS = None  # "rows": the row-by-row kernel, whatever the launch would take

    want_pool, want_out = reference(**d, read=read, write=write)
    written = {w for w in write if 0 <= w < SLOTS}
    res = {}
    forms = {
        "wy": triton_gdn_wy.delta_rule_wy,
        "rows": triton_gdn.delta_rule_slots,
    }
    for form, fn in forms.items():
        t = {k: v.to(device) for k, v in d.items()}
        pool = t["pool"].clone()
        r = torch.tensor(read, dtype=torch.int32, device=device)
        w = torch.tensor(write, dtype=torch.int32, device=device)
        args = (t["mixed"], t["a_raw"], t["b_raw"], t["a_log"], t["dt_bias"], pool, t["rows"], r, w, SLOTS, HK, DK)
        out = fn(*args).double().cpu()
        pool = pool.double().cpu()
        live = sorted(written)
        res[form] = {
            "err_out": ((out - want_out).abs().max() / want_out.abs().max()).item(),
            "err_state": ((pool[live] - want_pool[live]).abs().max() / want_pool[live].abs().max()).item(),
            "untouched": all(torch.equal(pool[s], d["pool"][s].double()) for s in range(SLOTS + 1) if s not in written),
        }
    return res


def cases(device: str) -> dict:
    out = {}
    # one sequence of 77 rows: writes after row 5 (inside the first chunk), after row 31 (a chunk's end) and
    # after its last row, into the slot it read
    write = [-1] * 77
    write[5], write[31], write[76] = 4, 6, 2
    for kind in ("random", "near_keys", "strong_decay", "overflowing_gate"):
        out[f"prefill77_{kind}"] = run(device, inputs(1, 77, kind, 1), [2], write)
    # a verification of W = 5 for two sequences, every row writing its own slot; one reads the zero state
    out["verify_w5_near_keys"] = run(device, inputs(2, 5, "near_keys", 2), [9, -1], list(range(10)))
    return out


if __name__ == "__main__":
    print(json.dumps(cases(sys.argv[1])))
