"""The torch semantics of every family against a loop-by-loop transcription of ``docs/kernels.md``."""

from __future__ import annotations

import doctest

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgen.runtime import semantics as reference
from specgen.runtime.semantics import SEMANTICS
from specgen.specializations.families import FAMILIES

I32 = torch.int32


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def slot_py(bt, b, p, bs):
    if not 0 <= p < len(bt[b]) * bs:
        return -1
    entry = bt[b][p // bs]
    value = entry * bs + p % bs
    return value if entry >= 0 and value <= INT32_MAX else -1


def read_s(s, W):  # a sequence length as every family reads it: saturated so S + W fits int32
    return min(s, INT32_MAX - W)


def read_a(a, W):  # an accepted count as every family reads it
    return min(max(a, 0), W - 1)


def token_update_py(last, draft, W):
    tok = lambda x: x if INT32_MIN <= x <= INT32_MAX else -1  # noqa: E731
    return {"tokens": [x for b in range(len(last)) for x in [last[b]] + [tok(d) for d in draft[b]]]}


def metadata_py(S, bt, W, bs):
    B = len(S)
    return {
        "positions": [max(read_s(S[b], W) + j, 0) for b in range(B) for j in range(W)],
        "slot_mapping": [slot_py(bt, b, read_s(S[b], W) + j, bs) for b in range(B) for j in range(W)],
        "kv_lens": [max(read_s(S[b], W) + W, 0) for b in range(B)],
        "query_start_loc": [i * W for i in range(B + 1)],
    }


def tiling_py(S, W, bs, ns):
    kv = [max(read_s(S[b], W) + j + 1, 0) for b in range(len(S)) for j in range(W)]
    nb = [-(-k // bs) for k in kv]
    offsets = [0]
    for n in nb:
        offsets.append(min(offsets[-1] + n, INT32_MAX) if offsets[-1] < INT32_MAX else INT32_MAX)
    m = max(kv)
    return {
        "row_kv_lens": kv,
        "row_num_blocks": nb,
        "row_last_block_len": [k - (n - 1) * bs if k else 0 for k, n in zip(kv, nb)],
        "row_block_offsets": offsets,
        "max_kv_len": [m],
        "kv_split_len": [min(-(-(-(-m // bs)) // ns) * bs, INT32_MAX)],
    }


def greedy_py(draft, target, W):
    acc, nxt = [], []
    for d, t in zip(draft, target):
        a = max(a for a in range(W) if all(d[i] == t[i] for i in range(a)))
        acc.append(a)
        nxt.append([t[i] if i <= a else -1 for i in range(W)])
    return {"accepted": acc, "next_tokens": nxt}


def rejection_py(draft, target, q, p, u, temperature, W):
    """spec_rejection_verify: greedy rows compare tokens, sampled rows u * q < p (Python floats: float64)."""
    acc, nxt = [], []
    for b in range(len(draft)):
        keep = (
            (lambda i: draft[b][i] == target[b][i]) if temperature[b] <= 0 else (lambda i: u[b][i] * q[b][i] < p[b][i])
        )
        a = 0
        while a < W - 1 and keep(a):
            a += 1
        acc.append(a)
        nxt.append([draft[b][i] if i < a else target[b][i] if i == a else -1 for i in range(W)])
    return {"accepted": acc, "next_tokens": nxt}


def next_draft_py(acc, target, S, bt, sc, W, bs):
    out = {k: [] for k in ("next_last_token", "next_seq_lens", "draft_positions", "draft_slots", "hidden_rows")}
    for b in range(len(acc)):
        a = read_a(acc[b], W)
        s1 = read_s(S[b], W) + a + 1
        out["next_last_token"].append(target[b][a])
        out["next_seq_lens"].append(max(s1, 0))
        out["draft_positions"].append([max(s1 - 1, 0), max(s1, 0)])
        out["draft_slots"].append([slot_py(bt, b, s1 - 1, bs) if a == W - 1 else sc, slot_py(bt, b, s1, bs)])
        out["hidden_rows"].append([b * W + max(a - 1, 0), b * W + a])
    return out


def context_py(acc, S, bt, W, bs):
    return {
        "context_slots": [
            slot_py(bt, b, read_s(S[b], W) + j, bs) if j <= read_a(acc[b], W) else -1
            for b in range(len(S))
            for j in range(W)
        ]
    }


def row_remap_py(src_rows, tokens, acc, last, n_in, bt, sc, W, bs):
    """spec_batch_row_remap, row by row: the source row's state, prepare_next_draft's slots over row b's table."""
    B = len(src_rows)
    out = {k: [] for k in ("tokens", "accepted", "next_last_token", "next_seq_lens", "draft_positions")}
    out |= {"draft_slots": [], "hidden_rows": [], "hidden_src": []}
    for b in range(B):
        s = src_rows[b]
        if not 0 <= s < B:
            out["tokens"] += [0] * W
            out["hidden_src"] += [-1] * W
            for k, v in (("accepted", 0), ("next_last_token", 0), ("next_seq_lens", 0)):
                out[k].append(v)
            out["draft_positions"].append([0, 0])
            out["draft_slots"].append([-1, -1])
            out["hidden_rows"].append([b * W, b * W])
            continue
        a, n = read_a(acc[s], W), n_in[s]
        out["tokens"] += tokens[s * W : (s + 1) * W]
        out["hidden_src"] += [s * W + j for j in range(W)]
        out["accepted"].append(a)
        out["next_last_token"].append(last[s])
        out["next_seq_lens"].append(max(n, 0))
        out["draft_positions"].append([max(n - 1, 0), max(n, 0)])
        out["draft_slots"].append([slot_py(bt, b, n - 1, bs) if a == W - 1 else sc, slot_py(bt, b, n, bs)])
        out["hidden_rows"].append([b * W + max(a - 1, 0), b * W + a])
    return out


INT32 = st.integers(INT32_MIN, INT32_MAX)


@st.composite
def cases(draw):
    """A batch anywhere in int32: block boundaries, the end of the table, past it, negative lengths,
    -1 and overflowing entries, accepted counts outside 0..W-1, int64 drafts outside int32."""
    B, W = draw(st.integers(1, 64)), draw(st.integers(2, 16))
    BT, BS = draw(st.sampled_from([(1, 16), (4, 16), (8, 16), (64, 128), (3, 7)]))
    cap = BT * BS
    special = st.sampled_from(
        [
            0,
            BS - 1,
            BS,
            max(cap - W, 0),
            cap - W + 1,
            cap,
            cap + 3,
            -1,
            -W,
            -BS - 1,
            INT32_MIN,
            INT32_MAX - W,
            INT32_MAX - W + 1,
            INT32_MAX,
        ]
    )
    boundary = st.builds(lambda k, d: max(k * BS + d, 0), st.integers(0, BT), st.sampled_from([-1, 0, 1]))
    S = draw(st.lists(st.one_of(special, boundary, st.integers(0, cap + W), INT32), min_size=B, max_size=B))
    entry = st.one_of(st.integers(0, 4096), st.sampled_from([-1, INT32_MAX // BS, INT32_MAX // BS + 1]), INT32)
    bt = draw(st.lists(st.lists(entry, min_size=BT, max_size=BT), min_size=B, max_size=B))
    acc = draw(
        st.lists(
            st.one_of(st.integers(0, W - 1), st.sampled_from([-1, W, INT32_MIN, INT32_MAX]), INT32),
            min_size=B,
            max_size=B,
        )
    )
    target = draw(st.lists(st.lists(st.integers(0, 5), min_size=W, max_size=W), min_size=B, max_size=B))
    # drafts agree with the target up to a drawn prefix, so every acceptance occurs
    draft = [t[: W - 1] for t in target]
    for b, cut in enumerate(draw(st.lists(st.integers(0, W - 1), min_size=B, max_size=B))):
        if cut < W - 1:
            draft[b][cut] = target[b][cut] + 1
    dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    wide = (
        [
            [draw(st.sampled_from([2**31, INT32_MIN - 1, 2**40])) if draw(st.integers(0, 7)) == 0 else d for d in row]
            for row in draft
        ]
        if dtype == torch.int64
        else draft
    )
    # sampled verification's floats: probabilities and keyed uniforms, and any float32 (NaN, infinities,
    # subnormals); a quarter of the target probabilities tie with u * q rounded to float32
    prob = st.one_of(st.floats(0, 1, width=32), st.floats(width=32))
    rows = lambda x: st.lists(st.lists(x, min_size=W - 1, max_size=W - 1), min_size=B, max_size=B)  # noqa: E731
    q, p = draw(rows(prob)), draw(rows(prob))
    u = draw(rows(st.one_of(st.integers(0, 2**24 - 1).map(lambda k: k * 2**-24), st.floats(width=32))))
    ties = draw(rows(st.integers(0, 3)))
    p = [[float(torch.tensor(x * y).float()) if k == 0 else z for x, y, z, k in zip(*r)] for r in zip(u, q, p, ties)]
    temperature = draw(st.lists(st.one_of(st.just(0.0), st.floats(width=32)), min_size=B, max_size=B))
    return dict(
        q=q,
        p=p,
        u=u,
        temperature=temperature,
        B=B,
        W=W,
        BT=BT,
        BS=BS,
        S=S,
        bt=bt,
        acc=acc,
        target=target,
        draft=draft,
        wide=wide,
        dtype=dtype,
        last=draw(st.lists(st.integers(-5, 2**31 - 1), min_size=B, max_size=B)),
        sc=draw(st.integers(0, 10**6)),
        ns=draw(st.sampled_from([1, 3, 8])),
    )


def _call(family, inputs, expected, **kw):
    outs = {k: torch.full(torch.tensor(v).shape, -777, dtype=I32) for k, v in expected.items()}
    args = [inputs[a.name] if not a.output else outs[a.name] for a in FAMILIES[family].args]
    SEMANTICS[family](*args, **kw)
    for k, v in expected.items():
        assert outs[k].tolist() == v, (family, k)


# a case holds up to 64 rows of a 64-wide table on purpose: hypothesis's entropy limit is not a defect here
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.data_too_large])
@given(cases())
def test_references_match_kernels_md(c):
    t = lambda v, dt=I32: torch.tensor(v, dtype=dt)  # noqa: E731
    W, BS = c["W"], c["BS"]
    ins = {
        "last_tokens": t(c["last"]),
        "draft_tokens": t(c["wide"], c["dtype"]).reshape(c["B"], W - 1),
        "seq_lens": t(c["S"]),
        "block_table": t(c["bt"]),
        "accepted": t(c["acc"]),
        "target_tokens": t(c["target"]),
        "scratch_slot": t([c["sc"]]),
    }
    _call("spec_verify_token_update", ins, token_update_py(c["last"], c["wide"], W))
    _call("spec_verify_metadata_update", ins, metadata_py(c["S"], c["bt"], W, BS), block_size=BS)
    _call(
        "spec_verify_attention_tiling_update", ins, tiling_py(c["S"], W, BS, c["ns"]), block_size=BS, num_splits=c["ns"]
    )
    ins32 = dict(ins, draft_tokens=t(c["draft"]).reshape(c["B"], W - 1))
    _call("greedy_prefix_verify", ins32, greedy_py(c["draft"], c["target"], W))
    f32 = lambda v: t(v, torch.float32).reshape(c["B"], -1)  # noqa: E731
    sampled = dict(ins32, draft_probs=f32(c["q"]), target_draft_probs=f32(c["p"]), accept_uniforms=f32(c["u"]))
    sampled["temperature"] = t(c["temperature"], torch.float32)
    expect = rejection_py(c["draft"], c["target"], c["q"], c["p"], c["u"], c["temperature"], W)
    _call("spec_rejection_verify", sampled, expect)
    _call(
        "prepare_next_draft", ins, next_draft_py(c["acc"], c["target"], c["S"], c["bt"], c["sc"], W, BS), block_size=BS
    )
    _call("context_kv_update", ins, context_py(c["acc"], c["S"], c["bt"], W, BS), block_size=BS)
    # the next block's anchor: prepare_next_draft's first two outputs on the same inputs
    nxt = next_draft_py(c["acc"], c["target"], c["S"], c["bt"], c["sc"], W, BS)
    _call("prepare_next_block", ins, {k: nxt[k] for k in ("next_last_token", "next_seq_lens")})
    # the row remap: rows of the batch, none (-1) and past it; the moved lengths are the drawn lengths
    B = c["B"]
    src_rows = [(b * 7 + 3) % (B + 2) - 1 for b in range(B)]
    tokens = [x for row in c["target"] for x in row]
    remap = dict(ins, src_rows=t(src_rows), src_tokens=t(tokens), src_accepted=t(c["acc"]))
    remap |= {"src_next_last_token": t(c["last"]), "src_next_seq_lens": t(c["S"])}
    expect = row_remap_py(src_rows, tokens, c["acc"], c["last"], c["S"], c["bt"], c["sc"], W, BS)
    _call("spec_batch_row_remap", remap, expect, block_size=BS)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.sampled_from([2, 4, 6]), st.integers(0, 2**31 - 1))
def test_row_remap_moves_what_prepare_next_draft_left(B, W, seed):
    """Remapping the rows a step left equals the step over the remapped rows: prepare_next_draft's outputs
    for a permutation of the sequences (tables grown since), and nothing read past a row that has no source."""
    BT, BS = 8, 16
    g = torch.Generator().manual_seed(seed)
    S = torch.randint(0, BT * BS - W - 1, (B,), generator=g, dtype=I32)
    table = torch.randint(1, 500, (B, BT), generator=g, dtype=I32)
    acc = torch.randint(0, W, (B,), generator=g, dtype=I32)
    target = torch.randint(0, 50, (B, W), generator=g, dtype=I32)
    sc = torch.tensor([7], dtype=I32)
    names = ("next_last_token", "next_seq_lens", "draft_positions", "draft_slots", "hidden_rows")
    before = {n: torch.zeros((B, 2) if n.startswith(("draft", "hidden")) else (B,), dtype=I32) for n in names}
    reference.prepare_next_draft(acc, target, S, table, sc, *before.values(), block_size=BS)
    perm = torch.randperm(B, generator=g)
    src = torch.where(torch.rand(B, generator=g) < 0.25, -1, perm).to(I32)  # a quarter join from nowhere
    has = src >= 0
    outs = {n: torch.full_like(v, -777) for n, v in before.items()}
    tokens, accepted, hidden_src = (torch.full((n,), -777, dtype=I32) for n in (B * W, B, B * W))
    moved = (src, target.reshape(-1), acc, before["next_last_token"], before["next_seq_lens"])
    reference.spec_batch_row_remap(*moved, table[perm], sc, tokens, accepted, *outs.values(), hidden_src, block_size=BS)
    want = {n: torch.zeros_like(v) for n, v in before.items()}
    p = perm.long()
    reference.prepare_next_draft(acc[p], target[p], S[p], table[p], sc, *want.values(), block_size=BS)
    for n in names:
        assert torch.equal(outs[n][has], want[n][has]), n
    assert torch.equal(accepted[has], acc[p][has]) and not accepted[~has].any()
    assert torch.equal(tokens.view(B, W)[has], target[p][has])
    rows = (p[:, None] * W + torch.arange(W)).to(I32)
    assert torch.equal(hidden_src.view(B, W)[has], rows[has]) and bool((hidden_src.view(B, W)[~has] == -1).all())
    assert bool((outs["draft_slots"][~has] == -1).all())


def test_slot_is_minus_one_outside_the_table():
    bt = torch.tensor([[5, 9]], dtype=I32)
    got = reference.slot(bt, torch.tensor([[-1, 0, 15, 16, 31, 32]]), 16)
    assert got.tolist() == [[-1, 80, 95, 144, 159, -1]]


def test_slot_is_minus_one_for_unallocated_or_overflowing_entries():
    lim = INT32_MAX // 128  # 2**24 - 1: the largest entry whose slots all fit int32
    bt = torch.tensor([[-1, lim, lim + 1]], dtype=I32)
    got = reference.slot(bt, torch.tensor([[0, 127, 128, 255, 256]]), 128)
    assert got.tolist() == [[-1, -1, lim * 128, INT32_MAX, -1]]


def test_the_issue_examples_stay_inside_the_sequence():
    """S = -5, a -1 entry, accepted counts of +-2**31, S = 2**31 - 1 (docs/kernels.md, outside the domain)."""
    i32 = lambda *v: torch.tensor(v, dtype=I32)  # noqa: E731
    bt = i32([0, 1], [-1, 3])
    pos, slots, kv, qsl = (torch.full((n,), -777, dtype=I32) for n in (8, 8, 2, 3))
    reference.spec_verify_metadata_update(i32(-5, 0), bt, pos, slots, kv, qsl, block_size=4)
    assert slots.tolist() == [-1] * 4 + [-1] * 4 and pos.tolist() == [0] * 4 + [0, 1, 2, 3]
    outs = [torch.full(s, -777, dtype=I32) for s in [(2,), (2,), (2, 2), (2, 2), (2, 2)]]
    reference.prepare_next_draft(
        i32(2**31 - 1, -(2**31)),
        i32([5, 6, 7, 8], [9, 10, 11, 12]),
        i32(2**31 - 1, 1),
        bt,
        i32(99),
        *outs,
        block_size=4,
    )
    last, lens, positions, dslots, rows = (o.tolist() for o in outs)
    assert last == [8, 9] and rows == [[2, 3], [4, 4]]
    assert lens == [INT32_MAX, 2] and positions == [[INT32_MAX - 1, INT32_MAX], [1, 2]]
    assert dslots == [[-1, -1], [99, -1]]  # position 2 of sequence 1 is in its unallocated block 0


def test_references_cover_every_family():
    assert set(SEMANTICS) == set(FAMILIES)


def test_doctests():
    assert doctest.testmod(reference).failed == 0
