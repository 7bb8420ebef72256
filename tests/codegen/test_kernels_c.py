"""Every family, rendered, lowered for c, compiled and run against the reference.

Each variant is built once per session (``c_kernels`` in this folder's
conftest); outputs are poisoned before every launch so an unwritten element
shows up.  These tests draw inside the guarded domain; ``test_fuzz_c.py``
covers the whole int32 range.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.codegen.guards import eval_guard, guards
from specgen.codegen.lower import ToolchainMissing, compile_artifact, lower
from specgen.codegen.templates import render_program
from specgen.runtime.semantics import SEMANTICS
from specgen.specializations.families import FAMILIES, TAIL_COMPOSITES, shape_of
from specgen.specializations.guard_check import GUARD_CHECK, GUARD_SLOTS
from specgen.specializations.variants import VariantSpec

pytestmark = pytest.mark.slow

POISON = -777
# the production layout at w4 and w5; bt8/bs16 crosses a block every few tokens; w6/bt3/bs5 has
# W > BS and a block size that is no power of two (test_fuzz_c.py fuzzes a subset of these variants)
LAYOUTS = [(4, 64, 128), (5, 64, 128), (6, 3, 5), (2, 8, 16), (16, 8, 16)]
VARIANTS = (
    [
        ("spec_verify_token_update", w, None, None, d)
        for w, d in [(2, "int64"), (4, "int32"), (5, "int64"), (6, "int32"), (16, "int32")]
    ]
    + [("greedy_prefix_verify", w, None, None, "int32") for w in (2, 4, 5, 6, 16)]
    + [("spec_rejection_verify", w, None, None, "int32") for w in (2, 4, 16)]
    + [("spec_verify_attention_tiling_update", w, None, bs, "int32") for w, _, bs in LAYOUTS]
    + [
        (f, w, bt, bs, "int32")
        for f in ("spec_verify_metadata_update", "prepare_next_draft", "context_kv_update")
        for w, bt, bs in LAYOUTS
    ]
    + [("spec_verify_head_update", w, bt, bs, d) for (w, bt, bs), d in zip(LAYOUTS, ["int32", "int64"] * 3)]
    + [("spec_verify_linear_state_update", w, None, None, "int32") for w in (2, 4, 5, 6, 16)]
    + [("prepare_next_block", w, None, None, "int32") for w in (2, 5, 16)]
    + [("spec_batch_row_remap", w, bt, bs, "int32") for w, bt, bs in LAYOUTS]
    + [("spec_verify_hybrid_head_update", w, bt, bs, d) for (w, bt, bs), d in zip(LAYOUTS, ["int64", "int32"] * 3)]
    # the tails: verification, then the next draft's inputs or the context slots, the accepted count passed on
    + [(f, w, bt, bs, "int32") for f in TAIL_COMPOSITES for w, bt, bs in LAYOUTS[::2]]
    + [(GUARD_CHECK, w, bt, bs, "int32") for w, bt, bs in LAYOUTS]
)


def _id(v):
    return VariantSpec(*v[:5]).key


@pytest.fixture(scope="module")
def built(c_kernels):
    c_kernels.require(VARIANTS)
    return c_kernels


def _max_seq_len(v) -> int:
    """Largest S the variant's guards admit (the last valid position)."""
    family, w, bt, bs, _ = v
    cap = (bt or 64) * (bs or 128)
    if family == "spec_batch_row_remap":  # the moved lengths: the next step's S
        return cap - 1
    return cap - w - 1 if "prepare_next_draft" in (family, *FAMILIES[family].members) else cap - w


def _inputs(v, batch, seed):
    family, w, bt, bs, dtype = v
    g = torch.Generator().manual_seed(seed)
    rnd = lambda lo, hi, *shape: torch.randint(lo, hi, shape, generator=g, dtype=torch.int32)  # noqa: E731
    top, bs_ = _max_seq_len(v), bs or 16
    seq = rnd(0, top + 1, batch)
    # a third at block boundaries (p % BS in {0, BS - 1}), some at the last valid position
    edge = (rnd(0, top // bs_ + 1, batch) * bs_ + rnd(0, 2, batch) * (bs_ - 1)).clamp(max=top)
    kind = rnd(0, 6, batch)
    seq = torch.where(kind < 2, edge, torch.where(kind == 2, torch.full_like(seq, top), seq))
    target = rnd(0, 3, batch, w)
    draft = target[:, :-1].clone()
    cut = rnd(0, w, batch).long()  # first mismatch; w - 1 means all drafts accepted
    rows = torch.nonzero(cut < w - 1)[:, 0]
    draft[rows, cut[rows]] += 1
    # sampled verification: probabilities, keyed uniforms (multiples of 2**-24) and a mix of greedy rows
    probs = lambda *shape: torch.rand(shape, generator=g)  # noqa: E731
    return {
        "draft_probs": probs(batch, w - 1),
        "target_draft_probs": probs(batch, w - 1),
        "accept_uniforms": rnd(0, 2**24, batch, w - 1).float() * 2**-24,
        "temperature": torch.where(rnd(0, 3, batch) == 0, 0.0, probs(batch) + 0.1),
        "seq_lens": seq,
        "block_table": rnd(0, 50000, batch, bt or 1),
        "accepted": rnd(0, w, batch),
        "target_tokens": target,
        "draft_tokens": draft.to(getattr(torch, dtype)),
        "last_tokens": rnd(-(2**31), 2**31 - 1, batch),
        "scratch_slot": rnd(0, 10**6, 1),
        # a sequence's own W linear-state slots, a few unassigned (-1)
        "state_slots": torch.where(
            rnd(0, 8, batch, w) == 0, -1, torch.arange(batch * w, dtype=torch.int32).view(batch, w)
        ).to(torch.int32),
        # the row remap: a permutation of the rows, a few joining from nowhere (-1), moved lengths in the domain
        "src_rows": torch.where(rnd(0, 6, batch) == 0, -1, torch.randperm(batch, generator=g).to(torch.int32)),
        "src_tokens": rnd(0, 1000, batch * w),
        "src_accepted": rnd(0, w, batch),
        "src_next_last_token": rnd(0, 1000, batch),
        "src_next_seq_lens": torch.where(kind < 2, edge, torch.where(kind == 2, torch.full_like(seq, top), seq)).flip(
            0
        ),
    }


def _guard_inputs(ins: dict, v, g: torch.Generator) -> dict:
    """The device guard's checks: bounds around the drawn lengths (some rows outside), a reach up to a few
    blocks, table entries that are negative, past int32's last block or the scratch block in places, and some
    accepted counts out of range: every bit is set in some rows and clear in others."""
    family, w, bt, bs, _ = v
    s, table = ins["seq_lens"], ins["block_table"]
    rnd = lambda lo, hi, *shape: torch.randint(lo, hi, shape, generator=g, dtype=torch.int32)  # noqa: E731
    mid = int(s.float().median())
    lo = torch.where(rnd(0, 3, GUARD_SLOTS) == 0, -(2**31), mid - rnd(0, 40, GUARD_SLOTS))
    hi = torch.where(rnd(0, 3, GUARD_SLOTS) == 0, 2**31 - 1, mid + rnd(0, 40, GUARD_SLOTS))
    scratch = int(table.flatten()[0])
    odd = rnd(0, 12, *table.shape)
    table = torch.where(odd == 0, -1, torch.where(odd == 1, 2**31 // bs, torch.where(odd == 2, scratch, table)))
    params = torch.cat([lo, hi, torch.tensor([int(rnd(-1, 2 * bs + w, 1)), scratch, w - 1], dtype=torch.int32)])
    acc = ins["accepted"]
    acc = torch.where(rnd(0, 8, *acc.shape) == 0, rnd(-3, 2 * w, *acc.shape), acc)  # some counts out of range
    return ins | {"guard_params": params.to(torch.int32), "block_table": table.to(torch.int32), "accepted": acc}


def _outputs(v, batch):
    fam = FAMILIES[v[0]]
    return {a.name: torch.full(shape_of(a, batch, v[1], v[2]), POISON, dtype=torch.int32) for a in fam.outputs}


def _reference_kwargs(v):
    keys = FAMILIES[v[0]].key_params
    kw = {"block_size": v[3]} if "BS" in keys else {}
    return kw | ({"num_splits": 8} if FAMILIES[v[0]].uses_num_splits else {})


@pytest.mark.parametrize("variant", VARIANTS, ids=_id)
@settings(max_examples=10, deadline=None)
@given(batch=st.one_of(st.integers(1, 256), st.sampled_from([1, 127, 128, 129, 256])), seed=st.integers(0, 2**31 - 1))
def test_variant_matches_reference(built, variant, batch, seed):
    fam = FAMILIES[variant[0]]
    ins = _inputs(variant, batch, seed)
    if variant[0] == GUARD_CHECK:
        ins = _guard_inputs(ins, variant, torch.Generator().manual_seed(seed + 1))
    s = ins["seq_lens"]
    for g in guards(VariantSpec(*variant[:4])):
        assert eval_guard(g.expr, min_seq_len=int(s.min()), max_seq_len=int(s.max()), batch=batch), g
    got, want = _outputs(variant, batch), _outputs(variant, batch)
    built.run(variant, ins | got, batch)
    SEMANTICS[variant[0]](*[(want if a.output else ins)[a.name] for a in fam.args], **_reference_kwargs(variant))
    for name in got:
        assert torch.equal(got[name], want[name]), (name, got[name], want[name])


def test_every_family_is_covered():
    # a block family (one block per row, shapes over the vocabulary V) has tests of its own
    assert {v[0] for v in VARIANTS} == {f for f, fam in FAMILIES.items() if fam.threads_per != "block"}


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_every_family_compiles_for_cuda(tmp_path):
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = []
        # the vocabulary families (one variant for every width, 40 s of lowering each) are compiled once, by
        # test_build.py's widths-ends build, which checks their scalars the same way
        compiled = [f for f, fam in FAMILIES.items() if "W" in fam.key_params or not fam.uses_vocab]
        for family in compiled:
            low = lower(render_program(family, 4, 64, 128), "cuda", "sm_90")
            fam = FAMILIES[family]  # the int32 scalars after the pointers, by name: B, C, V, a width-free W
            scalars = ["B"] + ["C"] * fam.uses_chunks + ["V"] * fam.uses_vocab + ["W"] * fam.width_free
            assert low.params[-len(scalars) :] == scalars == [p for p in low.params if p in ("B", "C", "V", "W")]
            assert f"void __launch_bounds__({FAMILIES[family].threads or 128}, 1) {low.entry}(" in low.source
            jobs.append(pool.submit(compile_artifact, low, tmp_path / f"{family}.cubin"))
        for job in jobs:
            assert job.result()[0] == "nvcc"
    assert all((tmp_path / f"{f}.cubin").stat().st_size > 0 for f in compiled)


def test_every_family_lowers_to_ascend_c(tmp_path):
    for family in (f for f, fam in FAMILIES.items() if fam.threads_per != "block"):  # blocks: not for ascend
        low = lower(render_program(family, 5, 8, 16, target="ascend"), "ascend")
        assert f'extern "C" __global__ __vector__ void {low.entry}(' in low.source
        assert "asc_vf_call" in low.source and low.params[-1] == "B"
    if shutil.which("bisheng") is None:
        with pytest.raises(ToolchainMissing, match="bisheng"):
            compile_artifact(low, tmp_path / "x.o")
