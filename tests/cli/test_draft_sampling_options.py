"""``--draft-sampling`` reaches the engine from every command that takes it (``generate``, ``bench``,
``serve-bench``), is recorded in their results, and is refused in one line where it would change nothing."""

from __future__ import annotations

import json

import pytest

from specgen.cli import main
from specgen.engine.engine import SpecDecodeEngine


@pytest.fixture
def engines(monkeypatch) -> list[str]:
    """The ``draft_sampling`` of every engine built while the test runs."""
    seen: list[str] = []
    init = SpecDecodeEngine.__init__

    def spy(self, *args, **kw):
        seen.append(kw.get("draft_sampling", "sample"))
        init(self, *args, **kw)

    monkeypatch.setattr(SpecDecodeEngine, "__init__", spy)
    return seen


SAMPLED = ["--model", "tiny", "--device", "cpu", "--temperature", "0.8", "--top-p", "0.9"]


def test_generate_passes_and_records_it(engines, capsys):
    argv = ["generate", *SAMPLED, "--prompt-ids", "1,2,3", "--max-new-tokens", "6", "--json"]
    assert main([*argv, "--draft-sampling", "argmax"]) == 0
    assert json.loads(capsys.readouterr().out)["sampling"]["draft_sampling"] == "argmax"
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["sampling"]["draft_sampling"] == "sample"
    assert engines == ["argmax", "sample"]


def test_bench_passes_and_records_it(engines, tmp_path):
    argv = ["bench", *SAMPLED, "--modes", "baseline", "--steps", "2", "--warmup", "1", "--batch", "1",
            "--prompt-len", "6", "--block-table-width", "0", "--out", str(tmp_path)]  # fmt: skip
    assert main([*argv, "--draft-sampling", "argmax"]) == 0
    assert engines and set(engines) == {"argmax"}
    assert json.loads((tmp_path / "bench.json").read_text())["sampling"]["draft_sampling"] == "argmax"


def test_serve_bench_passes_it(engines, tmp_path):
    argv = ["serve-bench", *SAMPLED, "--modes", "baseline", "--num-requests", "3", "--rates", "inf",
            "--prompt-len", "fixed:4", "--output-len", "fixed:4", "--out", str(tmp_path)]  # fmt: skip
    assert main([*argv, "--draft-sampling", "argmax"]) == 0
    assert engines and set(engines) == {"argmax"}


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--temperature", "0"], "--draft-sampling argmax needs --temperature > 0"),
        (["--temperature", "0.8", "--draft", "dspark"], "a dspark draft's tokens are one-hot already"),
    ],
)
def test_generate_refuses_it_where_it_changes_nothing(argv, words, capsys):
    args = ["generate", "--model", "tiny", "--device", "cpu", "--prompt-ids", "1,2", "--draft-sampling", "argmax"]
    assert main([*args, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def test_the_parsers_choices_are_the_engines():
    """bench's parser spells the values without loading torch; they must be the engine's."""
    from specgen.bench.config import DRAFT_SAMPLING as PARSER
    from specgen.engine.sampling import DRAFT_SAMPLING as ENGINE

    assert PARSER == ENGINE
