"""Fixtures of the command-line tests: one small build folder, made once and copied by each test."""

from __future__ import annotations

import shutil

import pytest

# the smallest real build: one family at two widths, one boundary planned
BASE_BUILD = [
    "--families",
    "greedy_prefix_verify",
    "--boundary",
    "verify-to-draft",
    "--draft-dtypes",
    "int32",
    "--quiet",
]


@pytest.fixture(scope="session")
def base_build(tmp_path_factory):
    """A build folder holding greedy_prefix_verify w4 and w5 for target c (built once per session)."""
    from specgen.cli import main

    out = tmp_path_factory.mktemp("cli_base") / "kernels"
    assert main(["build", "--widths", "4,5", "--out", str(out), *BASE_BUILD]) == 0
    return out


@pytest.fixture
def small():
    """The options that keep a test build small (one family, one boundary, int32 drafts, no progress)."""
    return list(BASE_BUILD)


@pytest.fixture
def folder(base_build, tmp_path):
    """A fresh copy of ``base_build`` that a test may change."""
    out = tmp_path / "kernels"
    shutil.copytree(base_build, out)
    return out


@pytest.fixture
def keys():
    """``keys(folder, target=None)``: the (key, target) pairs its manifest lists, each checked to be on disk."""
    import json

    def read(out, target=None):
        manifest = json.loads((out / "manifest.json").read_text())
        pairs = set()
        for v in manifest["variants"]:
            assert (out / v["artifact"]).is_file(), f"{v['artifact']} is in the manifest but not on disk"
            if target is None or v["target"] == target:
                pairs.add((v["key"], v["target"]))
        return pairs

    return read
