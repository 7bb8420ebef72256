"""``SPECGEN_CODEGEN_CACHE``: a lowering or a compiler run done once is given again, the same, and nothing
is kept without it."""

from __future__ import annotations

import ctypes
import subprocess

import pytest
import torch

from specgen.codegen import lower as lower_mod
from specgen.codegen.lower import CACHE_ENV, CompileError, Lowered, compile_many, lower
from specgen.codegen.templates import render_variant
from specgen.runtime.semantics import SEMANTICS
from specgen.specializations.families import FAMILIES, shape_of
from specgen.specializations.variants import VariantSpec

SPEC = VariantSpec("greedy_prefix_verify", 4)


def _no_lowering(*a, **k):
    raise AssertionError("lowered again")


def _no_compiler(*a, **k):
    raise AssertionError("compiled again")


def test_a_lowering_and_a_compiler_run_are_done_once(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    program = render_variant(SPEC, "c")
    first = lower(program, "c", symbol="v4")
    assert len(list((tmp_path / "cache" / "lower").iterdir())) == 1
    other = lower(program, "c", symbol="v4b")  # another symbol: another entry, lowered
    assert other.entry == "v4b_kernel" and other.source != first.source
    compile_many([first], tmp_path / "a.so")

    monkeypatch.setattr(lower_mod, "_lower", _no_lowering)
    again = lower(program, "c", symbol="v4")
    assert isinstance(again, Lowered) and again == first
    with pytest.raises(AssertionError, match="lowered again"):
        lower(program, "c", symbol="v5")  # not lowered before

    monkeypatch.setattr(subprocess, "run", _no_compiler)
    (tmp_path / "b").mkdir()
    cmd = compile_many([again], tmp_path / "b" / "b.so")
    assert cmd[0] in ("g++", "clang++", "c++")
    assert (tmp_path / "b" / "b.so").read_bytes() == (tmp_path / "a.so").read_bytes()
    assert (tmp_path / "b" / "b.c").read_text() == first.source  # the source is still written beside it
    with pytest.raises(AssertionError, match="compiled again"):
        compile_many([other], tmp_path / "c.so")

    # the artifact given from the cache runs
    monkeypatch.undo()
    fn = getattr(ctypes.CDLL(str(tmp_path / "b" / "b.so")), again.entry)
    fn.restype = ctypes.c_int32
    draft, target = torch.tensor([[1, 2, 3]], dtype=torch.int32), torch.tensor([[1, 2, 9, 9]], dtype=torch.int32)
    acc, nxt = (torch.full(shape_of(a, 1, 4, 0), -1, dtype=torch.int32) for a in FAMILIES[SPEC.family].outputs)
    tensors = {"draft_tokens": draft, "target_tokens": target, "accepted": acc, "next_tokens": nxt}
    args = [tensors[p].data_ptr() if p in again.pointer_params else 1 for p in again.params]
    fn.argtypes = [ctypes.c_void_p if p in again.pointer_params else ctypes.c_int32 for p in again.params]
    assert fn(*args) == 0
    want_acc, want_next = torch.full_like(acc, -1), torch.full_like(nxt, -1)
    SEMANTICS["greedy_prefix_verify"](draft, target, want_acc, want_next)
    assert torch.equal(acc, want_acc) and torch.equal(nxt, want_next) and acc.tolist() == [2]


def test_a_failed_compiler_run_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    low = lower(render_variant(SPEC, "c"), "c", symbol="bad")
    broken = Lowered(**{**low.__dict__, "source": low.source + "\nthis is not C++;\n"})
    for _ in range(2):
        with pytest.raises(CompileError):
            compile_many([broken], tmp_path / "x.so")
    assert not (tmp_path / "cache" / "compile").exists()


def test_without_the_variable_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    low = lower(render_variant(SPEC, "c"), "c", symbol="plain")
    compile_many([low], tmp_path / "p.so")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.c", "p.so"]
    assert lower_mod._cache_file("lower", {}) is None
