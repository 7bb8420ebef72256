"""Variants compiled together: one artifact per batch, the cache per variant, dead artifacts removed."""

from __future__ import annotations

import json

import pytest
import torch

from specgen.codegen.batch import batches, compile_job, read_stamp
from specgen.driver import plan_and_build
from specgen.runtime.library import load_library
from specgen.runtime.manifest import ArtifactError, read_artifact
from specgen.runtime.semantics import SEMANTICS
from specgen.specializations import DEFAULT

pytestmark = pytest.mark.slow
FAMILY = ("greedy_prefix_verify",)


def _build(out, widths):
    return plan_and_build(
        DEFAULT.with_overrides(widths=widths, draft_dtypes=["int32"]),
        ("c",),
        out,
        jobs=2,
        boundaries=("verify-to-draft",),
        families=FAMILY,
        progress=None,
    )


def _variants(out):
    return {v["key"]: v for v in json.loads((out / "manifest.json").read_text())["variants"]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("batch") / "kernels"
    summary = _build(out, [4, 5])
    assert summary.built == 2 and summary.compiler_runs == 1 and not summary.failed
    return out


def test_batches_cover_every_key_in_even_runs():
    for n in range(1, 40):
        keys = [f"k{i}" for i in range(n)]
        runs = batches(keys, 16)
        assert [k for r in runs for k in r] == keys
        assert max(map(len, runs)) <= 16 and max(map(len, runs)) - min(map(len, runs)) <= 1
    assert batches([], 16) == []


def test_one_library_holds_both_variants_and_each_entry_runs(folder):
    v = _variants(folder)
    w4, w5 = v["greedy_prefix_verify__w4"], v["greedy_prefix_verify__w5"]
    assert w4["artifact"] == w5["artifact"] and w4["sha256"] == w5["sha256"]
    assert (w4["entry"], w5["entry"]) == ("greedy_prefix_verify__w4_kernel", "greedy_prefix_verify__w5_kernel")
    assert sorted(p.name for p in (folder / "c").glob("*.so")) == [w4["artifact"].split("/")[1]]
    lib = load_library(folder)
    for W in (4, 5):
        B = 7
        target = torch.randint(0, 9, (B, W), dtype=torch.int32)
        drafts = target[:, : W - 1].clone()
        drafts[::2, 1] += 1  # every other row rejects at the second draft
        args = [drafts, target, torch.full((B,), -7, dtype=torch.int32), torch.full((B, W), -7, dtype=torch.int32)]
        want = [t.clone() for t in args]
        SEMANTICS["greedy_prefix_verify"](*want)
        lib.get("greedy_prefix_verify", W)(*args)
        assert all(torch.equal(g, w) for g, w in zip(args, want)), W


def test_one_changed_variant_is_rebuilt_alone_and_dead_libraries_go(folder, tmp_path):
    import shutil

    out = tmp_path / "kernels"
    shutil.copytree(folder, out)
    shared = _variants(out)["greedy_prefix_verify__w4"]["artifact"]
    stamp = out / "c" / "greedy_prefix_verify__w5.json"
    stamp.write_text(json.dumps(dict(json.loads(stamp.read_text()), cache_key="changed", render_key="changed")))
    s = _build(out, [4, 5])
    assert (s.built, s.cached, s.compiler_runs) == (1, 1, 1)
    v = _variants(out)
    assert v["greedy_prefix_verify__w4"]["artifact"] == shared != v["greedy_prefix_verify__w5"]["artifact"]
    assert (out / shared).exists()  # w4 still uses it
    stamp = out / "c" / "greedy_prefix_verify__w4.json"
    stamp.write_text(json.dumps(dict(json.loads(stamp.read_text()), cache_key="changed", render_key="changed")))
    assert _build(out, [4]).built == 1
    assert not (out / shared).exists()  # no variant uses it any more
    assert sorted(p.name for p in (out / "c").glob("*.so")) == sorted(
        {x["artifact"].split("/")[1] for x in _variants(out).values()}
    )


def test_a_tampered_shared_library_is_refused_for_every_variant_in_it(folder, tmp_path):
    import shutil

    out = tmp_path / "kernels"
    shutil.copytree(folder, out)
    art = out / _variants(out)["greedy_prefix_verify__w4"]["artifact"]
    art.write_bytes(art.read_bytes() + b"x")
    lib = load_library(out)
    for e in lib.entries():
        with pytest.raises(ArtifactError, match=r"--widths 4,5 .*--families greedy_prefix_verify"):
            read_artifact(e, lib.root)
        assert read_stamp(out, "c", e.key) is None  # the build will remake it


def test_a_batch_that_does_not_compile_is_compiled_one_variant_at_a_time(folder, tmp_path):
    from specgen.codegen.lower import Lowered

    good = (folder / "c" / "greedy_prefix_verify__w4.c").read_text()
    stamp = json.loads((folder / "c" / "greedy_prefix_verify__w4.json").read_text())

    def member(key, source):
        low = Lowered("c", None, source, f"{key}_kernel", stamp["params"], [], stamp["threads"], stamp["grid"])
        return {"key": key, "cache_key": key, "program": "# program", "lowered": low}

    out = tmp_path / "kernels"
    result = compile_job(
        {
            "out": str(out),
            "stage": str(tmp_path / "stage"),
            "target": "c",
            "family": "greedy_prefix_verify",
            "members": [member("greedy_prefix_verify__w4", good), member("broken__w4", "int broken_kernel( {")],
        }
    )
    assert list(result["stamps"]) == ["greedy_prefix_verify__w4"] and list(result["failed"]) == ["broken__w4"]
    assert result["runs"] == 3  # the batch, then each variant alone
    assert (
        read_stamp(out, "c", "greedy_prefix_verify__w4")["sha256"]
        == result["stamps"]["greedy_prefix_verify__w4"]["sha256"]
    )


def test_a_warm_build_renders_only_when_its_inputs_changed(folder, tmp_path, monkeypatch):
    import shutil

    from specgen.codegen import build

    out = tmp_path / "kernels"
    shutil.copytree(folder, out)
    rendered = []  # the variants handed to workers to render (and lower where the program changed)
    real = build._run
    monkeypatch.setattr(
        build, "_run", lambda todo, *a, **k: rendered.extend(j["key"] for j in todo) or real(todo, *a, **k)
    )
    assert _build(out, [4, 5]).cached == 2 and rendered == []  # stamps say the renderer's inputs are the same
    stamp = out / "c" / "greedy_prefix_verify__w5.json"
    before = json.loads(stamp.read_text())
    stamp.write_text(json.dumps(dict(before, render_key="other")))
    s = _build(out, [4, 5])
    assert (s.built, s.cached) == (0, 2) and rendered == ["greedy_prefix_verify__w5"]  # same program: cached
    assert json.loads(stamp.read_text()) == before  # the stamp records the render key again
    assert _build(out, [4, 5]).cached == 2 and rendered == ["greedy_prefix_verify__w5"]  # and is not rendered again
