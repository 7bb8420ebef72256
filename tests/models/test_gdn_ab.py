"""``benchmarks/gdn_ab.py``'s baseline loader: a module file that stands alone, or a folder holding a later
commit's ``triton_gdn.py`` with the module it imports relatively."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from oracles.scripts import benchmark_module

pytest.importorskip("triton")


@pytest.fixture
def gdn_ab():
    yield benchmark_module("gdn_ab")
    for name in [m for m in sys.modules if m == "gdn_base" or m.startswith("gdn_base.")]:
        del sys.modules[name]


def test_a_folder_loads_as_its_own_package(gdn_ab, tmp_path):
    from specgen.models import triton_gdn

    src = Path(triton_gdn.__file__).parent
    for name in ("triton_gdn.py", "triton_gdn_chunks.py", "triton_gdn_prefill.py"):
        shutil.copy(src / name, tmp_path / name)
    base = gdn_ab.load(str(tmp_path))
    assert base.__name__ == "gdn_base.triton_gdn" and base is not triton_gdn
    assert Path(base.__file__) == tmp_path / "triton_gdn.py"
    # its relative imports took the folder's copies, not the installed package's
    for name in ("triton_gdn_chunks", "triton_gdn_prefill"):
        assert Path(sys.modules[f"gdn_base.{name}"].__file__) == tmp_path / f"{name}.py"
    assert callable(base.conv_slots) and callable(base.delta_rule_slots)


def test_a_missing_baseline_is_an_error_that_names_it(gdn_ab, tmp_path):
    with pytest.raises(SystemExit, match="no baseline module at"):
        gdn_ab.load(str(tmp_path / "absent.py"))
    with pytest.raises(SystemExit, match="holds no triton_gdn.py"):
        gdn_ab.load(str(tmp_path))
