"""Layout and VariantSpec: the only records that spell and parse keys."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specgen.specializations import DRAFT_DTYPES, FAMILIES, KeyFormatError, Layout, UnknownFamily, VariantSpec
from specgen.specializations.variants import ANY_WIDTH, build_command, family_of, variants_command
from specgen.specializations.vocab_sample import VOCAB_FAMILIES

layouts = st.builds(
    Layout, st.integers(2, 16), st.integers(1, 4096), st.integers(1, 4096), st.sampled_from(DRAFT_DTYPES)
)


@given(layouts)
def test_layout_key_roundtrip(layout):
    assert Layout.parse(layout.key) == layout
    assert layout.key == (f"w{layout.width}_bt{layout.block_table_width}_bs{layout.block_size}_{layout.draft_dtype}")


@given(layouts, st.sampled_from(sorted(FAMILIES)))
def test_variant_key_roundtrip(layout, family):
    spec = VariantSpec.of(family, layout)
    width_part = f"w{layout.width}" if "W" in FAMILIES[family].key_params else "any"
    assert spec.key.startswith(f"{family}__{width_part}")
    # the key does not carry the split count; everything else comes back
    assert VariantSpec.parse(spec.key) == dataclasses.replace(spec, num_splits=None)


@pytest.mark.parametrize("family", VOCAB_FAMILIES)
def test_a_family_whose_key_lacks_w_has_one_variant_for_every_width(family):
    """Every constructor gives the one record: ``of`` at any layout, a width given directly, its key parsed."""
    specs = {VariantSpec.of(family, Layout(w, 64, 128, d)) for w in (2, 4, 16) for d in DRAFT_DTYPES}
    specs |= {VariantSpec(family, 5), VariantSpec(family, ANY_WIDTH)}
    assert specs == {VariantSpec(family, 0)}
    spec = specs.pop()
    assert spec.key == f"{family}__any" and spec.width == ANY_WIDTH and spec.fixed_width is None
    assert VariantSpec.parse(spec.key) == spec
    assert FAMILIES[family].width_free == (family != "spec_draft_sample")  # the draft's draw never names W
    for key in (f"{family}__w4", f"{family}__any_w4", f"{family}__any_any", "greedy_prefix_verify__any"):
        with pytest.raises(KeyFormatError):
            VariantSpec.parse(key)
    # a build at any width makes it: the caller's, else the smallest
    assert build_command(spec) == "specgen build --widths 2"
    assert build_command(spec, "cuda", 5) == "specgen build --widths 5 --target cuda"
    assert variants_command([spec, VariantSpec("greedy_prefix_verify", 4)]).startswith("specgen build --widths 4 ")
    assert variants_command([spec], width=6).startswith("specgen build --widths 6 ")


def test_of_keeps_only_what_the_key_names():
    lay = Layout(4, 64, 128, "int64")
    assert VariantSpec.of("spec_verify_token_update", lay) == VariantSpec(
        "spec_verify_token_update", 4, None, None, "int64"
    )
    assert VariantSpec.of("greedy_prefix_verify", lay).key == "greedy_prefix_verify__w4"
    tiling = "spec_verify_attention_tiling_update"
    assert VariantSpec.of(tiling, lay).key == f"{tiling}__w4_bs128"
    assert VariantSpec.of("spec_verify_attention_tiling_update", lay).num_splits == 8
    assert VariantSpec.of("spec_verify_head_update", lay).key == "spec_verify_head_update__w4_bt64_bs128_i64"
    assert VariantSpec.of("context_kv_update", lay).draft_dtype == "int32"


@pytest.mark.parametrize(
    "key",
    [
        "w4_bt64_bs128",
        "w4_bt64_bs128_int16",
        "bt64_w4_bs128_int32",
        "w4_bt64_bs128_int32_x",
        "W4_bt64_bs128_int32",
        "w_bt64_bs128_int32",
        "",
    ],
)
def test_bad_layout_keys(key):
    with pytest.raises(KeyFormatError):
        Layout.parse(key)


@pytest.mark.parametrize(
    "key",
    [
        "spec_verify_token_update",  # no separator
        "spec_verify_token_update__",  # nothing after it
        "spec_verify_token_update__bt64",  # no width
        "spec_verify_token_update__w4_x3",  # unknown part
        "spec_verify_token_update__w4_bt64",  # the family's key has no bt
        "spec_verify_metadata_update__w4_bs128_bt64",  # wrong order
        "spec_verify_metadata_update__w4",  # missing bt, bs
        "greedy_prefix_verify__w4_i64",  # no int64 variant
        "spec_verify_token_update__w04",  # not the canonical spelling
    ],
)
def test_bad_variant_keys(key):
    with pytest.raises(KeyFormatError):
        VariantSpec.parse(key)


def test_unknown_family_is_a_lookup_error_naming_the_known_ones():
    with pytest.raises(UnknownFamily, match="known: .*greedy_prefix_verify"):
        VariantSpec.parse("nope__w4")
    with pytest.raises(LookupError):
        family_of("nope")


def test_bad_fields():
    with pytest.raises(KeyFormatError, match="block_table_width"):
        VariantSpec("spec_verify_metadata_update", 4, None, 128)
    with pytest.raises(KeyFormatError, match="draft dtype"):
        VariantSpec("spec_verify_token_update", 4, draft_dtype="int16")


def test_with_dtype_and_build_command():
    spec = VariantSpec("spec_verify_token_update", 5)
    assert spec.with_dtype("int64").key == "spec_verify_token_update__w5_i64"
    assert VariantSpec("greedy_prefix_verify", 5).with_dtype("int64").draft_dtype == "int32"
    assert build_command(VariantSpec("context_kv_update", 4, 64, 128), "cuda") == (
        "specgen build --widths 4 --block-table-widths 64 --block-sizes 128 --target cuda"
    )
    assert build_command(spec.with_dtype("int64")) == "specgen build --widths 5 --draft-dtypes int64"
