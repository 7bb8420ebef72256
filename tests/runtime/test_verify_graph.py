"""SpecVerifyRuntime: the fast path equals the eager references, every fallback reason is exact."""

from __future__ import annotations

import gc
import json
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles.verify_step import (
    BS,
    BT,
    FIELDS,
    I32,
    ON,
    VOCAB,
    W,
    assert_same,
    inputs,
    make_drafts,
    model_forward,
    reference_step,
)

from specgen.runtime.capabilities import SpeculativeVerifyCapabilities
from specgen.runtime.library import load_library
from specgen.runtime.verify_graph import FastPathUnavailable, SpecVerifyRuntime


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    from specgen.driver import plan_and_build as build
    from specgen.specializations import Matrix

    out = tmp_path_factory.mktemp("verify_graph_build")
    try:
        build(Matrix(widths=(W,), block_table_widths=(BT,), block_sizes=(BS,)), ("c",), out=out, jobs=2, progress=None)
    except Exception as exc:  # no C toolchain
        pytest.skip(f"cannot build the c kernels here: {exc}")
    return load_library(out)


def test_sequence_comes_from_plans(lib):
    rt = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8)
    assert rt.kv_layout == (BT, BS)
    assert tuple(s.name for s in rt.sequence) == (
        f"spec_verify_head_update__w{W}_bt{BT}_bs{BS}",
        "target_forward",
        f"spec_verify_tail_update__w{W}_bt{BT}_bs{BS}",  # greedy_prefix_verify, then prepare_next_draft
    )
    assert rt.buckets == (1, 2, 4, 8)


def test_a_composite_the_build_lacks_runs_as_its_members(lib, tmp_path):
    """A folder built with ``--families`` naming the members but not the tail composite still takes the fast
    path: the composite's step runs as its members, in order, with the same results."""
    import shutil

    from specgen.runtime.library import load_library
    from specgen.runtime.manifest import MANIFEST_NAME

    folder = tmp_path / "members_only"
    shutil.copytree(lib.root, folder)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["variants"] = [v for v in manifest["variants"] if v["family"] != "spec_verify_tail_update"]
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))
    members = SpecVerifyRuntime(load_library(folder), model_forward, ON, W, max_batch=8)
    assert [s.name for s in members.sequence][2:] == [
        f"greedy_prefix_verify__w{W}",
        f"prepare_next_draft__w{W}_bt{BT}_bs{BS}",
    ]
    whole = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8)
    gen = torch.Generator().manual_seed(5)
    last, _, seq_lens, table = inputs(3, gen)
    drafts = make_drafts(last, seq_lens, gen, 0.5)
    a, b = (rt.step(last, drafts, seq_lens, table, (0, 60)) for rt in (members, whole))
    assert a.fast_path and b.fast_path
    for name in ("accepted", "next_tokens", "next_last_token", "next_seq_lens", "draft_slots", "hidden_rows"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.integers(1, 8), min_size=1, max_size=4),
    seed=st.integers(0, 2**31 - 1),
    p=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
)
def test_fast_path_matches_reference_over_steps(lib, batches, seed, p):
    gen = torch.Generator().manual_seed(seed)
    rt = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8)
    B = batches[0]
    last, _, seq_lens, table = inputs(B, gen)
    for _ in batches:  # the same sequences advance step by step
        drafts = make_drafts(last, seq_lens, gen, p)
        int64 = bool(torch.rand(1, generator=gen) < 0.5)
        res = rt.step(
            last,
            drafts.long() if int64 else drafts,
            seq_lens,
            table,
            seq_len_bounds=(int(seq_lens.min()), int(seq_lens.max())),
        )
        assert res.fast_path and res.reason is None
        exp = reference_step(last, drafts, seq_lens, table)
        assert_same(res, exp)
        last, seq_lens = res.next_last_token, res.next_seq_lens
    # a different batch size per step reuses (and re-pads) the buckets
    for B in batches:
        last, drafts, seq_lens, table = inputs(B, gen)
        assert_same(rt.step(last, drafts, seq_lens, table), reference_step(last, drafts, seq_lens, table))
    assert rt.stats() == {"fast_path": 2 * len(batches), "fallback": {}, "device_guard": {}}


def test_padding_rows_only_touch_scratch_block(lib):
    gen = torch.Generator().manual_seed(1)
    rt = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8)
    rt.step(*inputs(8, gen))  # fill the 8-bucket with real rows first
    last, drafts, seq_lens, table = inputs(5, gen)
    assert_same(rt.step(last, drafts, seq_lens, table), reference_step(last, drafts, seq_lens, table))
    bufs = rt._bufs[8]
    assert (bufs["seq_lens"][5:] == 0).all() and (bufs["block_table"][5:] == 0).all()
    pad_slots = torch.cat([bufs["slot_mapping"][5 * W :], bufs["draft_slots"][5:].reshape(-1)])
    assert ((pad_slots >= 0) & (pad_slots < BS)).all()  # the scratch block (block 0) only


@pytest.mark.parametrize(
    "case",
    [
        "capability_off",
        "variant_not_built",
        "batch_exceeds_buckets",
        "layout_mismatch",
        "layout_mismatch_table",
        "guard_failed",
    ],
)
def test_fallback_reasons(lib, case):
    gen = torch.Generator().manual_seed(7)
    width, caps, max_batch, B, bt, bs, max_len = W, ON, 8, 3, BT, BS, 100
    if case == "capability_off":
        caps = SpeculativeVerifyCapabilities(block_size=BS, block_table_width=BT)
    elif case == "variant_not_built":
        width = 5
    elif case == "batch_exceeds_buckets":
        max_batch, B = 2, 3
    elif case == "layout_mismatch":
        bs = 32
        caps = SpeculativeVerifyCapabilities(supports_in_graph_input_update=True, block_size=bs, block_table_width=BT)
    elif case == "layout_mismatch_table":
        bt = BT + 2
    elif case == "guard_failed":
        max_len = BT * BS  # beyond BT * BS - W: positions past the table write nowhere
    fwd = (
        model_forward
        if width == W
        else (lambda b: ((b["tokens"].long() * 7 + b["positions"].long()) % VOCAB).to(I32).view(-1, width))
    )
    eager_only = case in ("capability_off", "variant_not_built")
    if eager_only:  # a runtime that can never take the fast path is refused unless asked for
        with pytest.raises(FastPathUnavailable, match="allow_eager=True"):
            SpecVerifyRuntime(lib, fwd, caps, width, max_batch=max_batch)
    rt = SpecVerifyRuntime(lib, fwd, caps, width, max_batch=max_batch, allow_eager=eager_only)
    last = torch.randint(0, VOCAB, (B,), generator=gen, dtype=I32)
    seq_lens = torch.randint(0, max_len + 1, (B,), generator=gen, dtype=I32)
    if case == "guard_failed":
        seq_lens[0] = BT * BS - W + 1
    table = torch.randint(1, 64, (B, bt), generator=gen, dtype=I32)
    drafts = make_drafts(last, seq_lens, gen, 0.8, width)
    res = rt.step(last, drafts, seq_lens, table)
    reason = "layout_mismatch" if case == "layout_mismatch_table" else case
    assert not res.fast_path and res.reason == reason
    assert_same(res, reference_step(last, drafts, seq_lens, table, block_size=bs, width=width))
    assert rt.stats() == {"fast_path": 0, "fallback": {reason: 1}, "device_guard": {}}


def test_guard_uses_declared_bounds(lib):
    gen = torch.Generator().manual_seed(3)
    rt = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8)
    last, drafts, seq_lens, table = inputs(2, gen)
    res = rt.step(last, drafts, seq_lens, table, seq_len_bounds=(0, BT * BS))
    assert res.reason == "guard_failed"
    assert_same(res, reference_step(last, drafts, seq_lens, table))
    # declared bounds narrower than the data are widened on the host, never trusted blindly
    seq_lens[0] = BT * BS - 1
    res = rt.step(last, drafts, seq_lens, table, seq_len_bounds=(0, 10))
    assert res.reason == "guard_failed"
    assert_same(res, reference_step(last, drafts, seq_lens, table))


@pytest.mark.gpu
def test_cuda_graph_replay(tmp_path):
    from specgen.driver import plan_and_build as build
    from specgen.specializations import Matrix

    # the GPU machine has no TileLang: there the kernels come prebuilt, e.g.
    # specgen build --target cuda --widths 4 --block-table-widths 8 --block-sizes 16 --out build/verify_test_kernels
    prebuilt = os.environ.get("SPECGEN_TEST_CUDA_KERNELS")
    if not prebuilt:
        build(
            Matrix(widths=(W,), block_table_widths=(BT,), block_sizes=(BS,)),
            ("cuda",),
            out=tmp_path,
            jobs=2,
            progress=None,
        )
    lib = load_library(prebuilt or tmp_path)
    dev = torch.device("cuda")
    rt = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8, backend="cuda", device=dev)
    rt.capture_all()
    gen = torch.Generator().manual_seed(11)
    draft_stream = torch.cuda.Stream()
    mem = None
    for i, B in enumerate([3, 8, 1, 3, 5, 3]):
        last, drafts, seq_lens, table = inputs(B, gen)
        exp = reference_step(last, drafts, seq_lens, table)
        dl, dd, ds, dt = (t.to(dev) for t in (last, drafts, seq_lens, table))
        ready = torch.cuda.Event()
        with torch.cuda.stream(draft_stream):
            ready.record(draft_stream)
        torch.cuda.synchronize()
        gc.collect()  # what earlier tests left for the collector is freed now, not in the middle of the count
        before = torch.cuda.memory_allocated()
        torch.cuda.set_sync_debug_mode("error")
        try:
            res = rt.step(dl, dd, ds, dt, seq_len_bounds=(int(seq_lens.min()), int(seq_lens.max())), ready_event=ready)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert res.fast_path
        assert torch.cuda.memory_allocated() == before
        # no growth from step to step, counted from the end of the first step: allocations before it
        # settle frees the captures deferred (the first inputs' allocation released 9 KiB of them)
        mem = before if i == 1 else mem
        assert i < 1 or before == mem
        host = rt.host_result(0)
        assert torch.equal(host.accepted, exp["accepted"])
        assert torch.equal(host.next_tokens, exp["next_tokens"])
        assert torch.equal(host.next_seq_lens, exp["next_seq_lens"])
        assert_same(type(res)(**{n: getattr(res, n).cpu() for n in FIELDS}), exp)
    assert rt.stats()["fast_path"] == 6


def test_torch_kernels_in_the_sequence_equal_built(lib):
    """kernels="torch" runs the references in the (captured) sequence: same results, same fast path."""
    gen = torch.Generator().manual_seed(3)
    built = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8)
    torch_rt = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8, kernels="torch")
    assert torch_rt.sequence == built.sequence
    for B in (1, 5, 8):
        args = inputs(B, gen)
        a, b = built.step(*args), torch_rt.step(*args)
        assert a.fast_path and b.fast_path
        assert_same(b, reference_step(*args))
        assert_same(a, reference_step(*args))


def test_step_in_place_uses_the_persistent_buffers(lib):
    gen = torch.Generator().manual_seed(4)
    rt = SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8)
    last, drafts, seq_lens, table = inputs(5, gen)
    bufs = rt.buffers(5)
    assert bufs is rt.buffers(6)  # one bucket (8) serves both
    for name, t in (("last_tokens", last), ("draft_tokens", drafts), ("seq_lens", seq_lens), ("block_table", table)):
        bufs[name][:5].copy_(t)
    res = rt.step_in_place(5, (int(seq_lens.min()), int(seq_lens.max())))
    assert res.fast_path
    exp = reference_step(last, drafts, seq_lens, table)
    assert_same(res, exp)
    assert torch.equal(bufs["accepted"][:5], exp["accepted"])
    # a guard failure falls back, and the results still land in the buffers
    bufs["tokens"].fill_(-1)
    res = rt.step_in_place(5, (0, 10_000))
    assert res.reason == "guard_failed"
    assert torch.equal(bufs["next_seq_lens"][:5], exp["next_seq_lens"])
    # every buffer the step writes is current after a fallback too (the draft reads the verify rows)
    assert torch.equal(bufs["tokens"][: 5 * W].view(5, W), torch.cat([last[:, None], drafts], 1))
    assert torch.equal(bufs["kv_lens"][:5], seq_lens + W)
    # rows past the batch are padding again, whatever an earlier, larger step left there
    bufs["block_table"][5:].fill_(7)
    rt.step_in_place(5, (int(seq_lens.min()), int(seq_lens.max())))
    assert (bufs["block_table"][5:] == 0).all() and (bufs["seq_lens"][5:] == 0).all()
    with pytest.raises(LookupError, match="batch 9"):
        rt.buffers(9)


def test_npu_backend_needs_torch_npu(lib):
    import importlib.util

    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed here")
    with pytest.raises(RuntimeError, match="needs torch_npu"):
        SpecVerifyRuntime(lib, model_forward, ON, W, max_batch=8, backend="npu")
    with pytest.raises(ValueError, match="kernels must be"):
        SpecVerifyRuntime(lib, model_forward, ON, W, kernels="fast")
