"""``--draft-vocab`` reaches the draft (the MTP head, a block draft) from every command that takes it
(``generate``, ``bench``, ``serve-bench``), changes no emitted token, is recorded in their results, and is refused
in one line where it is wrong."""

from __future__ import annotations

import json

import pytest

from specgen.cli import main
from specgen.engine.engine import SpecDecodeEngine


@pytest.fixture
def vocabs(monkeypatch) -> list:
    """The ``draft_vocab`` size of the head of every engine built while the test runs (None: the whole head)."""
    seen: list = []
    init = SpecDecodeEngine.__init__

    def spy(self, model, head, *args, **kw):
        draft = getattr(head, "head", None) or getattr(head, "draft", head)  # an MTP or a block draft's proposer
        seen.append(getattr(draft.draft_vocab, "size", None))
        init(self, model, head, *args, **kw)

    monkeypatch.setattr(SpecDecodeEngine, "__init__", spy)
    return seen


TINY = ["--model", "tiny", "--device", "cpu"]


def test_generate_takes_a_count_and_a_file_and_emits_the_same_tokens(vocabs, capsys, tmp_path):
    argv = ["generate", *TINY, "--prompt-ids", "1,2,3", "--prompt-ids", "7", "--max-new-tokens", "8", "--json"]
    assert main(argv) == 0
    whole = json.loads(capsys.readouterr().out)
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps({"ids": [9, 4, 300, 17, 2]}))
    for spec, size in (("64", 64), (str(ids), 5)):
        assert main([*argv, "--draft-vocab", spec]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["draft_vocab"] == size and doc["outputs"] == whole["outputs"]
    assert whole["draft_vocab"] is None and vocabs == [None, 64, 5]
    block = ["generate", *TINY, "--prompt-ids", "4,5,6", "--max-new-tokens", "8", "--json", "--draft", "dspark"]
    assert main(block) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main([*block, "--draft-vocab", "48"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["draft_vocab"], doc["outputs"]) == (48, whole["outputs"]) and vocabs[-2:] == [None, 48]


def test_bench_and_serve_bench_record_it(vocabs, tmp_path):
    bench = ["bench", *TINY, "--modes", "baseline,specgen", "--steps", "2", "--warmup", "1", "--batch", "1",
             "--prompt-len", "6", "--block-table-width", "0", "--profile-steps", "0", "--check",
             "--draft-vocab", "100", "--out", str(tmp_path / "b")]  # fmt: skip
    assert main(bench) == 0
    doc = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert doc["draft_vocab"] == 100 and all(a["modes_agree"] for a in doc["agreement"])
    serve = ["serve-bench", *TINY, "--modes", "baseline", "--num-requests", "3", "--rates", "inf",
             "--prompt-len", "fixed:4", "--output-len", "fixed:4", "--draft-vocab", "32",
             "--out", str(tmp_path / "s")]  # fmt: skip
    assert main(serve) == 0
    assert json.loads((tmp_path / "s" / "serve_bench.json").read_text())["settings"]["draft_vocab"] == "32"
    assert vocabs and set(vocabs) == {100, 32}


@pytest.mark.parametrize("command", ["generate", "bench", "serve-bench"])
@pytest.mark.parametrize(
    "extra, words",
    [
        (["--draft-vocab", "0"], "keeps 1 to 512 ids"),
        (["--draft-vocab", "513"], "keeps 1 to 512 ids"),
        (["--draft-vocab", "no/such.json"], "no file 'no/such.json'"),
    ],
)
def test_a_bad_draft_vocab_is_one_line(command, extra, words, capsys, tmp_path):
    argv = {
        "generate": ["generate", *TINY, "--prompt-ids", "1,2", "--max-new-tokens", "2"],
        "bench": ["bench", *TINY, "--steps", "1", "--warmup", "1", "--out", str(tmp_path)],
        "serve-bench": ["serve-bench", *TINY, "--num-requests", "1", "--out", str(tmp_path)],
    }[command]
    assert main([*argv, *extra]) != 0
    last = capsys.readouterr().err.strip().splitlines()[-1]  # progress lines may come first
    assert last.startswith("specgen: error: --draft-vocab") and words in last, last
