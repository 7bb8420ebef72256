"""The specialization matrix (and its TOML form) and the target table."""

from __future__ import annotations

import pytest

from specgen.specializations import (
    DEFAULT,
    TARGET_NAMES,
    TARGET_OF_DEVICE,
    TARGETS,
    Layout,
    Matrix,
    MatrixError,
    load_toml,
    target,
)


def test_default_layouts():
    layouts = list(DEFAULT.layouts())
    assert len(layouts) == 6 and layouts[0] == Layout(4, 64, 128, "int32") and layouts[1].draft_dtype == "int64"
    assert {lay.width for lay in layouts} == {4, 5, 6}


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"widths": (17,)}, "width 17"),
        ({"widths": (1,)}, "width 1"),
        ({"widths": ()}, "empty"),
        ({"block_sizes": (0,)}, "block size must be positive"),
        ({"block_table_widths": (-1,)}, "block table width must be positive"),
        ({"draft_dtypes": ("int16",)}, "int16"),
        ({"num_splits": 0}, "num_splits"),
    ],
)
def test_matrix_errors(kw, match):
    with pytest.raises(MatrixError, match=match):
        Matrix(**kw)


def test_with_overrides_keeps_what_is_not_given():
    m = DEFAULT.with_overrides(widths=[2, 3], block_sizes=None)
    assert m.widths == (2, 3) and m.block_sizes == DEFAULT.block_sizes


def test_load_toml(tmp_path):
    good = tmp_path / "m.toml"
    good.write_text('widths = [2, 16]\nblock_sizes = [16]\ndraft_dtypes = ["int32"]\n')
    assert load_toml(good) == Matrix(widths=(2, 16), block_sizes=(16,), draft_dtypes=("int32",))
    unknown = tmp_path / "u.toml"
    unknown.write_text("widths = [4]\nwidth = 5\n")
    with pytest.raises(MatrixError, match=r"unknown keys \['width'\]"):
        load_toml(unknown)
    broken = tmp_path / "b.toml"
    broken.write_text("widths = [4\n")
    with pytest.raises(MatrixError, match="b.toml"):
        load_toml(broken)
    with pytest.raises(MatrixError, match="missing.toml"):
        load_toml(tmp_path / "missing.toml")
    bad = tmp_path / "w.toml"
    bad.write_text("widths = [40]\n")
    with pytest.raises(MatrixError, match="width 40"):
        load_toml(bad)


def test_target_table():
    assert TARGET_NAMES == ("c", "cuda", "ascend")
    for name, row in TARGETS.items():
        assert row.name == name and target(name) is row
        assert row.source_suffix.startswith(".") and row.artifact_suffix.startswith(".")
        assert TARGET_OF_DEVICE[row.device] == name
    assert TARGETS["cuda"].default_arch == "sm_90" and TARGETS["ascend"].dialect == "tilelang.ascend.language"
    with pytest.raises(ValueError, match=r"unknown target 'tpu' \(known: c, cuda, ascend\)"):
        target("tpu")
