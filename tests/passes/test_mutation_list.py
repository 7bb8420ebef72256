"""The mutation list of ``benchmarks/mutation.py`` parses and every patch applies to the current sources."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("specgen_mutation_tool", ROOT / "benchmarks" / "mutation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()
MUTATIONS = TOOL.load()


def test_the_list_covers_the_required_bugs():
    files = {m["file"] for m in MUTATIONS}
    assert {
        "passes/hoist.py",
        "passes/ir/analysis.py",
        "passes/fuse.py",
        "passes/ir/interpreter.py",
        "passes/sync_to_event.py",
        "passes/ir/op_semantics.py",
        "passes/capture.py",
        "runtime/host_mirror.py",
    } <= files
    for m in MUTATIONS:
        assert all((ROOT / t).exists() for t in m["tests"]), m["id"]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m["id"] for m in MUTATIONS])
def test_every_patch_applies_once(mutation):
    source = (ROOT / mutation["file"]).read_text()
    mutated = TOOL.mutate(source, mutation)
    assert mutated != source
    compile(mutated, mutation["file"], "exec")  # still Python: a kill must come from a test, not a syntax error


def test_a_patch_that_no_longer_applies_is_reported():
    with pytest.raises(TOOL.PatchError, match="matched 0 time"):
        TOOL.mutate("x = 1\n", {"id": "m", "file": "f.py", "find": "y = 2", "replace": "y = 3"})
