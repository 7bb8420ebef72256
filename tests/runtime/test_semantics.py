"""The torch semantics of every family against a loop-by-loop transcription of ``docs/kernels.md``."""

from __future__ import annotations

import doctest

import torch
from hypothesis import given, settings, strategies as st

from specgen.runtime import semantics as reference
from specgen.specializations.families import FAMILIES
from specgen.runtime.semantics import REFERENCES

I32 = torch.int32


def slot_py(bt, b, p, bs):
    return bt[b][p // bs] * bs + p % bs if 0 <= p < len(bt[b]) * bs else -1


def token_update_py(last, draft, W):
    return {"tokens": [x for b in range(len(last)) for x in [last[b]] + draft[b]]}


def metadata_py(S, bt, W, bs):
    B = len(S)
    return {"positions": [S[b] + j for b in range(B) for j in range(W)],
            "slot_mapping": [slot_py(bt, b, S[b] + j, bs) for b in range(B) for j in range(W)],
            "kv_lens": [S[b] + W for b in range(B)],
            "query_start_loc": [i * W for i in range(B + 1)]}


def tiling_py(S, W, bs, ns):
    kv = [S[b] + j + 1 for b in range(len(S)) for j in range(W)]
    nb = [-(-k // bs) for k in kv]
    offsets = [0]
    for n in nb:
        offsets.append(offsets[-1] + n)
    m = max(kv)
    return {"row_kv_lens": kv, "row_num_blocks": nb,
            "row_last_block_len": [k - (n - 1) * bs for k, n in zip(kv, nb)],
            "row_block_offsets": offsets, "max_kv_len": [m],
            "kv_split_len": [-(-(-(-m // bs)) // ns) * bs]}


def greedy_py(draft, target, W):
    acc, nxt = [], []
    for d, t in zip(draft, target):
        a = max(a for a in range(W) if all(d[i] == t[i] for i in range(a)))
        acc.append(a)
        nxt.append([t[i] if i <= a else -1 for i in range(W)])
    return {"accepted": acc, "next_tokens": nxt}


def next_draft_py(acc, target, S, bt, sc, W, bs):
    out = {k: [] for k in ("next_last_token", "next_seq_lens", "draft_positions", "draft_slots", "hidden_rows")}
    for b, a in enumerate(acc):
        s1 = S[b] + a + 1
        out["next_last_token"].append(target[b][a])
        out["next_seq_lens"].append(s1)
        out["draft_positions"].append([s1 - 1, s1])
        out["draft_slots"].append([slot_py(bt, b, s1 - 1, bs) if a == W - 1 else sc, slot_py(bt, b, s1, bs)])
        out["hidden_rows"].append([b * W + max(a - 1, 0), b * W + a])
    return out


def context_py(acc, S, bt, W, bs):
    return {"context_slots": [slot_py(bt, b, S[b] + j, bs) if j <= acc[b] else -1
                              for b in range(len(S)) for j in range(W)]}


@st.composite
def cases(draw):
    """A batch with positions at block boundaries, the last valid position and past it."""
    B, W = draw(st.integers(1, 64)), draw(st.integers(2, 16))
    BT, BS = draw(st.sampled_from([(1, 16), (4, 16), (8, 16), (64, 128), (3, 7)]))
    cap = BT * BS
    special = st.sampled_from([0, BS - 1, BS, max(cap - W, 0), cap - W + 1, cap, cap + 3])
    boundary = st.builds(lambda k, d: max(k * BS + d, 0), st.integers(0, BT), st.sampled_from([-1, 0, 1]))
    S = draw(st.lists(st.one_of(special, boundary, st.integers(0, cap + W)), min_size=B, max_size=B))
    bt = draw(st.lists(st.lists(st.integers(0, 4096), min_size=BT, max_size=BT), min_size=B, max_size=B))
    acc = draw(st.lists(st.integers(0, W - 1), min_size=B, max_size=B))
    target = draw(st.lists(st.lists(st.integers(0, 5), min_size=W, max_size=W), min_size=B, max_size=B))
    # drafts agree with the target up to a drawn prefix, so every acceptance occurs
    draft = [t[:W - 1] for t in target]
    for b, cut in enumerate(draw(st.lists(st.integers(0, W - 1), min_size=B, max_size=B))):
        if cut < W - 1:
            draft[b][cut] = target[b][cut] + 1
    dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    return dict(B=B, W=W, BT=BT, BS=BS, S=S, bt=bt, acc=acc, target=target, draft=draft,
                dtype=dtype, last=draw(st.lists(st.integers(-5, 2**31 - 1), min_size=B, max_size=B)),
                sc=draw(st.integers(0, 10**6)), ns=draw(st.sampled_from([1, 3, 8])))


def _call(family, inputs, expected, **kw):
    outs = {k: torch.full(torch.tensor(v).shape, -777, dtype=I32) for k, v in expected.items()}
    args = [inputs[a.name] if not a.output else outs[a.name] for a in FAMILIES[family].args]
    REFERENCES[family](*args, **kw)
    for k, v in expected.items():
        assert outs[k].tolist() == v, (family, k)


@settings(max_examples=150, deadline=None)
@given(cases())
def test_references_match_kernels_md(c):
    t = lambda v, dt=I32: torch.tensor(v, dtype=dt)  # noqa: E731
    W, BS = c["W"], c["BS"]
    ins = {"last_tokens": t(c["last"]), "draft_tokens": t(c["draft"], c["dtype"]).reshape(c["B"], W - 1),
           "seq_lens": t(c["S"]), "block_table": t(c["bt"]), "accepted": t(c["acc"]),
           "target_tokens": t(c["target"]), "scratch_slot": t([c["sc"]])}
    _call("spec_verify_token_update", ins, token_update_py(c["last"], c["draft"], W))
    _call("spec_verify_metadata_update", ins, metadata_py(c["S"], c["bt"], W, BS), block_size=BS)
    _call("spec_verify_attention_tiling_update", ins, tiling_py(c["S"], W, BS, c["ns"]),
          block_size=BS, num_splits=c["ns"])
    ins32 = dict(ins, draft_tokens=t(c["draft"]).reshape(c["B"], W - 1))
    _call("greedy_prefix_verify", ins32, greedy_py(c["draft"], c["target"], W))
    _call("prepare_next_draft", ins, next_draft_py(c["acc"], c["target"], c["S"], c["bt"], c["sc"], W, BS),
          block_size=BS)
    _call("context_kv_update", ins, context_py(c["acc"], c["S"], c["bt"], W, BS), block_size=BS)


def test_slot_is_minus_one_outside_the_table():
    bt = torch.tensor([[5, 9]], dtype=I32)
    got = reference.slot(bt, torch.tensor([[-1, 0, 15, 16, 31, 32]]), 16)
    assert got.tolist() == [[-1, 80, 95, 144, 159, -1]]


def test_references_cover_every_family():
    assert set(REFERENCES) == set(FAMILIES)


def test_doctests():
    assert doctest.testmod(reference).failed == 0
