"""The build folder shared by builds: the manifest merge, the lock, the staging folders of gone builds."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from specgen.codegen.folder import _host, folder_lock, merge, stale_staging, sweep_staging

SCHEMA = 2


def _variant(key, target="c", boundaries=("draft-to-verify",)):
    suffix = {"c": ".so", "cuda": ".cubin"}[target]
    return {
        "key": key,
        "target": target,
        "artifact": f"{target}/{key}{suffix}",
        "program": f"{target}/{key}.tl.py",
        "source": f"{target}/{key}.c",
        "boundaries": list(boundaries),
    }


def _manifest(variants, plans=None, widths=(4,)):
    return {
        "schema_version": SCHEMA,
        "targets": sorted({v["target"] for v in variants}),
        "variants": variants,
        "plans": plans or {},
        "matrix": {
            "widths": list(widths),
            "block_table_widths": [64],
            "block_sizes": [128],
            "draft_dtypes": ["int32"],
            "num_splits": 8,
        },
    }


def _on_disk(out, *variants):
    for v in variants:
        for rel in (v["artifact"], v["program"], v["source"], f"{v['target']}/{v['key']}.json"):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            (out / rel).write_text("x")


def test_merge_keeps_what_it_did_not_remake(tmp_path):
    a, b, gone = _variant("a__w4"), _variant("b__w4", "cuda"), _variant("c__w4")
    _on_disk(tmp_path, a, b)
    old = _manifest([a, b, gone], {"draft-to-verify": {"w4": {"old": 1}, "w5": {"old": 2}}}, widths=(4, 5))
    a_new = _variant("a__w4", boundaries=("verify-to-draft",))
    new = _manifest([a_new, _variant("d__w6")], {"draft-to-verify": {"w4": {"new": 1}}}, widths=(6,))
    merged, notes = merge(old, new, tmp_path, SCHEMA)
    assert [(v["key"], v["target"]) for v in merged["variants"]] == [("a__w4", "c"), ("b__w4", "cuda"), ("d__w6", "c")]
    assert merged["variants"][0]["boundaries"] == ["draft-to-verify", "verify-to-draft"]
    assert merged["plans"]["draft-to-verify"] == {"w4": {"new": 1}, "w5": {"old": 2}}
    assert merged["targets"] == ["c", "cuda"] and merged["matrix"]["widths"] == [4, 5, 6]
    assert notes == ["dropped 1 variant(s) whose artifact is gone: c__w4 (c)"]


def test_replace_deletes_the_variants_it_drops(tmp_path):
    a, b = _variant("a__w4"), _variant("b__w4")
    _on_disk(tmp_path, a, b)
    merged, _ = merge(
        _manifest([a, b], {"draft-to-verify": {"w4": {}}}),
        _manifest([_variant("a__w4")]),
        tmp_path,
        SCHEMA,
        replace=True,
    )
    assert [v["key"] for v in merged["variants"]] == ["a__w4"] and merged["plans"] == {}
    assert (tmp_path / "c" / "a__w4.so").exists()
    assert not any((tmp_path / "c").glob("b__w4*"))


def test_a_manifest_of_another_schema_is_not_merged(tmp_path):
    a = _variant("a__w4")
    _on_disk(tmp_path, a)
    merged, notes = merge(dict(_manifest([a]), schema_version=1), _manifest([]), tmp_path, SCHEMA)
    assert merged["variants"] == [] and "had schema 1" in notes[0]


def test_staging_of_gone_builds_is_swept_and_running_ones_are_kept(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    root = tmp_path / ".staging"
    mine, dead = root / f"{_host()}-{os.getpid()}-aaaa", root / f"{_host()}-{gone.pid}-bbbb"
    elsewhere, stray = root / f"otherhost-{gone.pid}-cccc", root / "leftover"
    for d in (mine, dead, elsewhere, stray):
        d.mkdir(parents=True)
    assert stale_staging(tmp_path) == sorted([dead, stray])
    sweep_staging(tmp_path)
    assert sorted(root.iterdir()) == sorted([mine, elsewhere])


def test_the_folder_lock_is_exclusive(tmp_path):
    held = threading.Event()

    def hold():
        with folder_lock(tmp_path):
            held.set()
            time.sleep(0.3)

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    t0 = time.perf_counter()
    with folder_lock(tmp_path):
        waited = time.perf_counter() - t0
    t.join()
    assert waited > 0.15


def test_a_manifest_that_does_not_parse_is_reported_not_merged(tmp_path):
    from specgen.codegen.folder import read_manifest

    assert read_manifest(tmp_path) == (None, None)
    (tmp_path / "manifest.json").write_text('{"schema_version": 2, "variants": [{"key": "a__w4"}]}')
    data, why = read_manifest(tmp_path)
    assert data is None and "missing field" in why and why.endswith("its variants are not kept")
    (tmp_path / "manifest.json").write_text("{not json")
    assert "cannot read it" in read_manifest(tmp_path)[1]
