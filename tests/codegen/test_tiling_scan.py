"""The tiling prefix of the per-row launch: a warp-cooperative shuffle scan on cuda, per-thread sums elsewhere.

Both compute the same int64 exclusive prefix of the row block counts; the C
kernels are checked against the semantics by the C fuzz, the cuda ones by
``test_fuzz_cuda.py`` on a GPU (batches of 1 to 1000 at widths up to 16: many
warps and blocks, partial last warps).  Here: which spelling each target
renders, in the standalone family and inside the composite head, that the
launch covers ``B * W`` rows, and that the cuda scan lowers to warp shuffles
whose mask holds only the warp's active lanes and compiles at the widths' ends.
"""

from __future__ import annotations

import shutil

import pytest

from specgen.codegen.lower import compile_many, lower
from specgen.codegen.templates import render_variant
from specgen.specializations.families import FAMILIES, TAIL_COMPOSITES
from specgen.specializations.guard_check import GUARD_CHECK
from specgen.specializations.variants import VariantSpec

SPECS = [
    VariantSpec("spec_verify_attention_tiling_update", 16, None, 128, "int32", 8),
    VariantSpec("spec_verify_head_update", 2, 64, 128),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.key)
def test_each_target_renders_its_prefix(spec):
    cuda, c = render_variant(spec, "cuda"), render_variant(spec, "c")
    assert "T.shfl_sync(incl" in cuda and "for k in T.serial(T.ceildiv(T.max(" in cuda
    assert "for q in T.serial(b):" not in cuda and "for q in T.serial(B):" not in cuda
    assert "shfl" not in c and "for q in T.serial(b):" in c and "for jq in T.serial(j):" in c
    assert "for q in T.serial(B):" in c


@pytest.mark.parametrize("target", ["c", "cuda", "ascend"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_head_families_launch_one_thread_per_row(family, target):
    fam = FAMILIES[family]
    spec = VariantSpec(family, 16, 64 if "BT" in fam.key_params else None, 128 if "BS" in fam.key_params else None)
    if fam.threads_per == "block":  # a block per row of its own rows (test_block_families.py)
        if target == "ascend":
            with pytest.raises(ValueError, match="not rendered for ascend"):
                render_variant(spec, target)
        else:
            # a family whose rows share C blocks each (the vocabulary pass): rows times C blocks on cuda
            grid = f"({fam.rows}) * C" if fam.uses_chunks and target == "cuda" else fam.rows
            assert f"with T.Kernel({grid}, threads=THREADS) as bx:" in render_variant(spec, target)
        return
    text = render_variant(spec, target)
    # the head and its members; the others (the tails after the forward and the device guard's check too) stay
    # per sequence
    per_row = family.startswith("spec_verify_") and family not in (*TAIL_COMPOSITES, GUARD_CHECK)
    assert fam.per_row == per_row
    assert ("T.ceildiv(B * W, THREADS)" in text) == per_row and ("T.ceildiv(B, THREADS)" in text) != per_row
    assert ("b = (r >> 4)" in text and "j = (r & 15)" in text) == per_row
    if per_row:  # a row's thread loops over no row of its sequence
        assert "for j in T.serial(W" not in text


def test_cuda_blocks_are_whole_warps():
    assert "THREADS = 64\n" in render_variant(SPECS[0], "cuda", threads=64)
    with pytest.raises(ValueError, match="no multiple of 32"):
        render_variant(SPECS[0], "cuda", threads=48)


def test_a_composite_of_differently_launched_members_is_refused():
    from specgen.specializations.families import Family, register, unregister

    with pytest.raises(ValueError, match="members launch differently"):
        register(Family("mixed_head", ("W",), (), members=("spec_verify_token_update", "greedy_prefix_verify")))
    unregister("mixed_head")
    assert "mixed_head" not in FAMILIES


@pytest.mark.slow
def test_cuda_prefix_lowers_to_masked_shuffles():
    source = lower(render_variant(SPECS[1], "cuda"), "cuda", symbol=SPECS[1].key).source
    assert source.count("__shfl_sync(") == 5  # two scans, their broadcast, the max scan and its broadcast
    assert "4294967295" in source and "- (uint)1" in source  # full warp, or the low n_active lanes
    assert "blockIdx.x) * 128) + ((int)threadIdx.x)) >> 1) < B)" in source  # b = r // 2 < B: the live rows
    # r < B * W is tested once, at the top: no access repeats it (a power-of-2 W once left TileLang unable
    # to prove it from b < B, and every row-indexed store carried its own check)
    assert source.count("< (B * 2)") == 1


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_per_row_head_compiles_for_cuda_at_the_widths_ends(tmp_path):
    specs = [
        VariantSpec("spec_verify_head_update", w, 64, 128, d) for w, d in ((2, "int64"), (5, "int32"), (16, "int32"))
    ]
    lowered = [lower(render_variant(s, "cuda"), "cuda", arch="sm_90", symbol=s.key) for s in specs]
    assert [low.grid for low in lowered] == ["(B * 2 + 127) // 128", "(B * 5 + 127) // 128", "(B * 16 + 127) // 128"]
    assert [low.source.count(f"< (B * {s.width})") for low, s in zip(lowered, specs)] == [1, 1, 1]
    compile_many(lowered, tmp_path / "head.cubin")
    assert (tmp_path / "head.cubin").read_bytes()[:4] == b"\x7fELF"


def test_a_composite_carries_a_value_only_within_a_sequence_thread():
    """A later member may read an earlier member's output only where it reads its own sequence's element
    (``own_row_inputs``) in a launch of one thread per sequence; the value stays an output."""
    from specgen.specializations.families import ArgSpec, Family, carried_values, register, unregister

    tail = FAMILIES["spec_verify_tail_update"]
    assert carried_values("spec_verify_tail_update") == {"accepted"}
    assert carried_values("spec_verify_head_update") == frozenset()
    assert [a.name for a in tail.inputs] == ["draft_tokens", "target_tokens", "seq_lens", "block_table", "scratch_slot"]
    assert "accepted" in [a.name for a in tail.outputs]
    acc, out = ArgSpec("accepted", "int32", "(B,)", True), ArgSpec("x", "int32", "(B * W,)", True)
    reader = ArgSpec("accepted", "int32", "(B,)", False)
    # per-row families: the row thread r of sequence b is not the thread that wrote accepted[b]
    register(Family("t_write_rows", ("W",), (acc,), threads_per="row"))
    register(Family("t_read_rows", ("W",), (reader, out), threads_per="row", own_row_inputs=("accepted",)))
    # a per-sequence reader that does not promise to read only its own element
    register(Family("t_read_any", ("W",), (reader, out)))
    cases = {
        ("t_write_rows", "t_read_rows"): "both read and written",
        ("greedy_prefix_verify", "t_read_any"): "both read and written",
        ("prepare_next_draft", "greedy_prefix_verify"): "before greedy_prefix_verify writes it",  # reader first
        ("greedy_prefix_verify", "spec_rejection_verify"): "before spec_rejection_verify writes it",  # two writers
    }
    try:
        for n, (members, match) in enumerate(cases.items()):
            with pytest.raises(ValueError, match=match):
                register(Family(f"t_composite_{n}", ("W",), (), members=members))
            assert f"t_composite_{n}" not in FAMILIES
    finally:
        for name in ("t_write_rows", "t_read_rows", "t_read_any"):
            unregister(name)
