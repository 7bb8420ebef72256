"""specgen build end to end: the default matrix for c, checked through the generated package."""

import dataclasses
import importlib
import json
import shutil
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.driver import plan_and_build as build
from specgen.runtime.library import VariantNotBuilt
from specgen.runtime.semantics import SEMANTICS
from specgen.specializations import DEFAULT
from specgen.specializations.families import FAMILIES, shape_of
from specgen.specializations.guard_check import GUARD_SLOTS
from specgen.specializations.vocab_sample import VOCAB_FAMILIES

pytestmark = pytest.mark.slow
POISON = -777


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernels")
    out = root / "specgen_kernels"
    summary = build(DEFAULT, ("c",), out, jobs=2, progress=None)
    assert not summary.failed and summary.built == 93
    sys.path.insert(0, str(root))
    try:
        yield out, importlib.import_module("specgen_kernels")
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("specgen_kernels", None)


def test_manifest_lists_every_planned_variant(built):
    out, pkg = built
    manifest = json.loads((out / "manifest.json").read_text())
    keys = {v["key"] for v in manifest["variants"]}
    for w in (4, 5, 6):
        assert {
            f"spec_verify_token_update__w{w}",
            f"spec_verify_token_update__w{w}_i64",
            f"spec_verify_metadata_update__w{w}_bt64_bs128",
            f"spec_verify_attention_tiling_update__w{w}_bs128",
            f"greedy_prefix_verify__w{w}",
            f"prepare_next_draft__w{w}_bt64_bs128",
            f"context_kv_update__w{w}_bt64_bs128",
            f"spec_verify_linear_state_update__w{w}",
            f"spec_verify_hybrid_head_update__w{w}_bt64_bs128",
            f"spec_verify_hybrid_head_update__w{w}_bt64_bs128_i64",
            f"spec_rejection_verify__w{w}",
            f"spec_batch_row_remap__w{w}_bt64_bs128",
        } <= keys
    # the vocabulary pass reads W from its tensors: one variant of each family serves every width
    vocab = {f"{f}__any" for f in VOCAB_FAMILIES}
    assert vocab <= keys and not any("sample__w" in k or "dense__w" in k for k in keys)
    for v in manifest["variants"]:
        assert (out / v["artifact"]).exists() and (out / v["program"]).exists() and (out / v["source"]).exists()
        assert v["guards"] and v["boundaries"] and v["sha256"]
    by_key = {v["key"]: v for v in manifest["variants"]}
    assert by_key["context_kv_update__w4_bt64_bs128"]["boundaries"] == ["context-kv", "context-kv-sampled"]
    assert "draft-to-verify" in by_key["spec_verify_metadata_update__w4_bt64_bs128"]["boundaries"]
    assert by_key["spec_verify_linear_state_update__w16"]["boundaries"] == ["draft-to-verify-linear"]
    assert by_key["spec_rejection_verify__w4"]["boundaries"] == ["context-kv-sampled", "verify-to-draft-sampled"]
    assert by_key["spec_rejection_verify__w16"]["boundaries"] == ["context-kv-sampled"]  # a block draft's width
    # a block draft's sampled tail (context-kv-sampled) needs only the one-hot vocabulary pass
    assert by_key["spec_target_sample__any"]["boundaries"] == ["context-kv-sampled", "verify-to-draft-sampled"]
    assert by_key["spec_draft_sample__any"]["boundaries"] == ["verify-to-draft-sampled"]
    # the row remap is built beside the tails it moves the state of (a serving loop launches it between steps)
    assert by_key["spec_batch_row_remap__w16_bt64_bs128"]["boundaries"] == ["context-kv", "context-kv-sampled"]
    assert len(by_key["spec_batch_row_remap__w4_bt64_bs128"]["boundaries"]) == 4
    assert pkg.variants() == sorted(keys)


def test_the_manifest_grid_covers_a_thread_per_row_or_per_sequence(built):
    from specgen.specializations.expr import SHAPE_NAMES, safe_eval

    out, _ = built
    manifest = json.loads((out / "manifest.json").read_text())
    widths = {v["width"] for v in manifest["variants"] if v["family"] == "spec_verify_head_update"}
    assert {4, 5, 6, 16} <= widths  # the composite head at the widths of both drafts
    for v in manifest["variants"]:
        threads, fam = v["launch"]["threads"], FAMILIES[v["family"]]
        for B in (1, 8, 9, 26, 256, 1000):
            env = {"B": B, "W": v["width"] or 3, "BT": 0, "NS": 0, "V": 37}  # width 0: any W (the tensors')
            grid = safe_eval(v["launch"]["grid"], env, SHAPE_NAMES)
            if fam.threads_per == "block":  # a block per row
                assert grid == safe_eval(fam.rows, env, SHAPE_NAMES), (v["key"], B)
                continue
            threads_needed = B * v["width"] if fam.per_row else B
            assert grid == -(-threads_needed // threads), (v["key"], B)


def test_rebuild_is_a_noop_and_manifest_is_byte_identical(built):
    out, _ = built
    first = (out / "manifest.json").read_bytes()
    summary = build(DEFAULT, ("c",), out, jobs=1, progress=None)
    assert summary.built == 0 and summary.cached == 93
    assert (out / "manifest.json").read_bytes() == first
    assert b"time" not in first


def test_missing_variant_names_the_build_command(built):
    _, pkg = built
    with pytest.raises(
        VariantNotBuilt, match=r"spec_verify_token_update__w7 is not built: run `specgen build --widths 7"
    ):
        pkg.get("spec_verify_token_update", width=7)(
            torch.zeros(1, dtype=torch.int32), torch.zeros(1, 6, dtype=torch.int32), torch.zeros(7, dtype=torch.int32)
        )


def _inputs(family, W, BT, BS, B, dtype, draw):
    """Inputs that hit the edges: block boundaries, the last valid position, every acceptance length."""
    cap = BT * BS
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    edges = torch.tensor([0, BS - 1, BS, 2 * BS - 1, cap - W, cap - W - 1], dtype=torch.int32)
    seq = torch.randint(0, cap - W + 1, (B,), generator=g, dtype=torch.int32)
    at_edge = torch.rand(B, generator=g) < 0.5  # half the rows sit on a block boundary or the last position
    seq = torch.where(at_edge, edges[torch.randint(0, len(edges), (B,), generator=g)], seq)
    drafts = torch.randint(0, 50, (B, W - 1), generator=g).to(getattr(torch, dtype))
    acc = torch.randint(0, W, (B,), generator=g, dtype=torch.int32)
    target = torch.randint(50, 100, (B, W), generator=g, dtype=torch.int32)
    for b in range(B):  # target agrees with the drafts for exactly acc[b] tokens
        target[b, : acc[b]] = drafts[b, : acc[b]].to(torch.int32)
    values = {
        "seq_lens": seq,
        "block_table": torch.randint(0, 4096, (B, BT), generator=g, dtype=torch.int32),
        "last_tokens": torch.randint(0, 50, (B,), generator=g, dtype=torch.int32),
        "draft_tokens": drafts if FAMILIES[family].has_draft_dtype else drafts.to(torch.int32),
        "target_tokens": target,
        "accepted": acc,
        "scratch_slot": torch.tensor([4096 * BS], dtype=torch.int32),
        "state_slots": torch.randint(-1, B * W, (B, W), generator=g, dtype=torch.int32),
        # the row remap: a permutation of the rows, a few with nothing to move (-1)
        "src_rows": torch.where(torch.rand(B, generator=g) < 0.2, -1, torch.randperm(B, generator=g)).to(torch.int32),
        "src_tokens": torch.randint(0, 100, (B * W,), generator=g, dtype=torch.int32),
        "src_accepted": torch.randint(0, W, (B,), generator=g, dtype=torch.int32),
        "src_next_last_token": torch.randint(0, 100, (B,), generator=g, dtype=torch.int32),
        "src_next_seq_lens": seq.flip(0),
        # sampled verification: probabilities, keyed uniforms and a third of the rows greedy
        "draft_probs": torch.rand(B, W - 1, generator=g),
        "target_draft_probs": torch.rand(B, W - 1, generator=g),
        "accept_uniforms": torch.randint(0, 2**24, (B, W - 1), generator=g).float() * 2**-24,
        "temperature": torch.where(torch.rand(B, generator=g) < 1 / 3, 0.0, torch.rand(B, generator=g) + 0.1),
        # the device guard: bounds that the last valid positions and the rows below BS break, a reach of W + 1
        # blocks' positions, block 0 as the scratch block
        "guard_params": torch.tensor(
            [BS, 0]
            + [-(2**31)] * (GUARD_SLOTS - 2)
            + [2**31 - 1, cap - W - 1]
            + [2**31 - 1] * (GUARD_SLOTS - 2)
            + [W + 1, 0, W - 1],
            dtype=torch.int32,
        ),
    }
    tensors = []
    for a in FAMILIES[family].args:
        if a.output:
            tensors.append(torch.full(shape_of(a, B, W, BT), POISON, dtype=torch.int32))
        else:
            tensors.append(values[a.name])
    return tensors


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_every_variant_matches_the_reference(built, data):
    _, pkg = built
    lib = pkg.library()
    for entry in lib.entries():
        fam = entry.family
        if FAMILIES[fam].uses_vocab:  # rows of logits, not int32 layouts: tests/codegen/test_vocab_sample.py
            continue
        B = data.draw(st.sampled_from([1, 2, 7, 64, 255, 256]) | st.integers(1, 256))
        W, BT, BS = entry.width, entry.block_table_width or 8, entry.block_size or 16
        args = _inputs(fam, W, BT, BS, B, entry.draft_dtype, data.draw)
        expect = [t.clone() for t in args]
        kw = {"block_size": BS} if "BS" in FAMILIES[fam].key_params else {}
        if FAMILIES[fam].uses_num_splits:
            kw["num_splits"] = entry.num_splits
        SEMANTICS[fam](*expect, **kw)
        lib.get(fam, W, entry.block_table_width, entry.block_size)(*args)
        for a, got, want in zip(FAMILIES[fam].args, args, expect):
            assert torch.equal(got, want), f"{entry.key}: {a.name} differs at B={B}"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_the_default_variants_compile_for_cuda_at_the_widths_ends(tmp_path):
    """Every family of the default build at its smallest and largest width compiles to an sm_90 cubin
    (``test_kernels_c`` compiles each family once; the GPU run builds every variant)."""
    ends = dataclasses.replace(DEFAULT, widths=(min(DEFAULT.widths), max(DEFAULT.widths)), block_widths=(16,))
    summary = build(ends, ("cuda",), tmp_path / "k", arch="sm_90", jobs=2, progress=None)
    assert summary.built > 0 and not summary.failed
    manifest = json.loads((tmp_path / "k" / "manifest.json").read_text())
    vocab = set()
    for v in manifest["variants"]:
        data = (tmp_path / "k" / v["artifact"]).read_bytes()
        assert v["artifact"].endswith(".cubin") and data[:4] == b"\x7fELF" and v["arch"] == "sm_90"
        fam = FAMILIES[v["family"]]
        if fam.uses_vocab and "W" not in fam.key_params:  # (test_kernels_c checks the other families' scalars)
            vocab.add(v["family"])
            scalars = ["B"] + ["C"] * fam.uses_chunks + ["V"] + ["W"] * fam.width_free
            assert [p for p in v["params"] if p in ("B", "C", "V", "W")] == scalars == v["params"][-len(scalars) :]
    assert vocab == {f for f, fam in FAMILIES.items() if fam.uses_vocab and "W" not in fam.key_params} != set()
