"""examples/own_engine.py: an engine that is not specgen's own drives the runtime on the CPU.

The example builds nothing; its kernels are built here, small (one width, int32 drafts, the
two composites of the verify step's plans), once per session.  It runs as a user runs it, in
a subprocess, and again with the compiler's modules made unimportable: the runtime and a built
folder are all an engine needs.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from oracles.no_compiler import BLOCK, COMPILER

import specgen

EXAMPLE = Path(specgen.__file__).resolve().parent / "examples" / "own_engine.py"
LAYOUT = {"widths": (4,), "block_table_width": 8, "block_size": 16}
FAMILIES = ("spec_verify_head_update", "spec_verify_tail_update")
CHECK = "tokens equal plain greedy decoding: True"


@pytest.fixture(scope="module")
def own_kernels(kernel_library) -> Path:
    """The folder the example's docstring builds: ``--widths 4 --block-table-widths 8 --block-sizes 16``."""
    lib = kernel_library("SPECGEN_TEST_EXAMPLE_KERNELS", LAYOUT, ("draft-to-verify", "verify-to-draft"), FAMILIES)
    return Path(lib.root)


def _run(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)


def _run_without_compiler(script: Path, kernels, tmp_path: Path) -> subprocess.CompletedProcess:
    """``script --kernels kernels --steps 4`` with the compiler's modules refused; it must exit 0 and print
    which compiler modules it loaded."""
    code = BLOCK + textwrap.dedent(f"""
        import runpy
        sys.argv = [{str(script)!r}, "--kernels", {str(kernels)!r}, "--steps", "4"]
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        finally:
            print("compiler modules loaded:", sorted(m for m in sys.modules if m.split(".")[0] in {COMPILER!r}))
    """)
    done = _run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done


def test_own_engine_matches_plain_greedy_decoding(own_kernels, tmp_path):
    done = _run([sys.executable, str(EXAMPLE), "--kernels", str(own_kernels)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert CHECK in done.stdout
    assert "fast path: 10 of 10 steps; fallback: none" in done.stdout


def test_own_engine_needs_no_compiler(own_kernels, tmp_path):
    """The same run with tilelang, jinja2, sympy and networkx refused by a ``sys.meta_path`` finder."""
    done = _run_without_compiler(EXAMPLE, own_kernels, tmp_path)
    assert CHECK in done.stdout and "fast path: 4 of 4 steps" in done.stdout
    assert "compiler modules loaded: []" in done.stdout


def test_own_engine_exits_nonzero_on_a_mismatch(own_kernels, tmp_path):
    """The check is a check: an engine whose forward drops its cache writes decodes other tokens."""
    broken = tmp_path / "broken_engine.py"
    text = EXAMPLE.read_text()
    assert "keep = slots >= 0" in text
    broken.write_text(text.replace("keep = slots >= 0", "keep = slots < -1"))
    done = _run([sys.executable, str(broken), "--kernels", str(own_kernels), "--spoil", "0"], tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert "tokens equal plain greedy decoding: False" in done.stdout


SAMPLED = EXAMPLE.with_name("own_engine_sampled.py")
SAMPLED_CHECK = "tokens equal the rule's host loop: True"


def test_own_sampling_engine_matches_the_rules_host_loop(sampling_kernels, tmp_path):
    """The sampled tail driven in place by an engine of its own: its tokens are the host rule's, every step fast."""
    done = _run([sys.executable, str(SAMPLED), "--kernels", str(sampling_kernels.root)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert SAMPLED_CHECK in done.stdout and "fast path: 10 of 10 steps; fallback: none" in done.stdout
    assert "vocabulary pass: spec_target_sample (built)" in done.stdout


def test_own_sampling_engine_needs_no_compiler_and_its_check_is_a_check(sampling_kernels, tmp_path):
    """With the compiler's modules refused it still runs; a forward that keeps no logits samples from nothing
    like the target's distribution, and the check says so (exit 1)."""
    done = _run_without_compiler(SAMPLED, sampling_kernels.root, tmp_path)
    assert SAMPLED_CHECK in done.stdout and "compiler modules loaded: []" in done.stdout
    broken = tmp_path / "own_engine_sampled.py"
    text = SAMPLED.read_text()
    assert "self.vocab.keep(logits)" in text
    broken.write_text(text.replace("self.vocab.keep(logits)", "pass"))
    (tmp_path / "own_engine.py").write_text(EXAMPLE.read_text())
    done = _run([sys.executable, str(broken), "--kernels", str(sampling_kernels.root)], tmp_path)
    assert done.returncode == 1 and "tokens equal the rule's host loop: False" in done.stdout, done.stdout
