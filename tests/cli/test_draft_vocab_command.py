"""``specgen draft-vocab``: the ids most frequent in a corpus (token ids, or text through the folder's tokenizer),
ties in id order, the share of the corpus they cover; the file it writes is one ``--draft-vocab`` reads; bad
input is one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from specgen.cli import draft_vocab, main
from specgen.models.draft_vocab import frequency_ranked

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from test_bench_checkpoint import write_folder  # noqa: E402


def _write(path: Path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_the_most_frequent_ids_first_ties_in_id_order(tmp_path, capsys):
    a = _write(tmp_path / "a.json", [[7, 3, 3, 9], [9, 9, 3, 1]])  # 3: 3, 9: 3, 7: 1, 1: 1
    b = _write(tmp_path / "b.json", [4, 4, 9])  # one flat list: 4: 2, 9: +1
    out = tmp_path / "ids.json"
    assert main(["draft-vocab", "--size", "4", "--token-ids", a, "--token-ids", b, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["ids"] == [9, 3, 4, 1]  # 9 (4), 3 (3), 4 (2), then 1 before 7 (1 each)
    assert (doc["tokens_counted"], doc["distinct_tokens"], doc["vocab_size"]) == (11, 5, 512)
    assert doc["coverage"] == pytest.approx(10 / 11)
    assert "cover 90.91% of the 11 tokens" in capsys.readouterr().out
    assert main(["generate", "--prompt-ids", "1,2", "--max-new-tokens", "3", "--draft-vocab", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["draft_vocab"] == 4


def test_ids_never_seen_fill_the_rest_in_id_order():
    counts = torch.zeros(10, dtype=torch.int64)
    counts[[8, 2]] = torch.tensor([5, 1])
    assert frequency_ranked(counts, 5).tolist() == [8, 2, 0, 1, 3]
    with pytest.raises(ValueError, match="keeps 1 to 10 ids"):
        frequency_ranked(counts, 11)


def test_text_goes_through_the_folders_tokenizer(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tokenizers", reason="--text needs the tokenizers package")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from oracles.hf_checkpoint import word_tokenizer

    folder = tmp_path / "ckpt"
    write_folder(folder)
    word_tokenizer(folder)  # token i is the word w{i}
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("w5 w6 w5\n\nw7 w5 w6\n")
    out = tmp_path / "ids.json"
    assert main(["draft-vocab", "--model", str(folder), "--size", "2", "--text", str(corpus), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["ids"] == [5, 6] and doc["tokens_counted"] == 6 and doc["coverage"] == pytest.approx(5 / 6)
    capsys.readouterr()
    monkeypatch.setattr(draft_vocab, "LINES_PER_BATCH", 2)  # a corpus streamed two lines at a time
    monkeypatch.setattr(draft_vocab, "PROGRESS_BATCHES", 1)
    corpus.write_text("w9 w9\nw3\n\nw9 w4\nw3 w3 w3\nw8\n")  # 5 lines: batches of 2, 2, 1
    assert main(["draft-vocab", "--model", str(folder), "--size", "3", "--text", str(corpus), "--out", str(out)]) == 0
    doc, err = json.loads(out.read_text()), capsys.readouterr().err
    assert doc["ids"] == [3, 9, 4] and doc["tokens_counted"] == 9
    assert "2 lines so far" in err and "4 lines so far" in err and "9 tokens in 5 sequences" in err
    corpus.write_bytes(b"w1 \xff\xfe\n")
    assert main(["draft-vocab", "--model", str(folder), "--size", "2", "--text", str(corpus), "--out", str(out)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"specgen: error: --text {corpus}: ") and "utf-8" in last, last


@pytest.mark.parametrize(
    "argv, words",
    [
        ([], "give --text FILE or --token-ids FILE"),
        (["--token-ids", "@ok", "--size", "0"], "--size 0: the model's vocabulary holds 512 ids"),
        (["--token-ids", "@ok", "--size", "513"], "--size 513"),
        (["--token-ids", "@missing"], "--token-ids"),
        (["--token-ids", "@bad"], "not JSON"),
        (["--token-ids", "@odd"], "expected a list of token-id lists"),
        (["--token-ids", "@far"], "token id 600 is outside the vocabulary (0..511)"),
        (["--token-ids", "@empty"], "the corpus holds no tokens"),
        (["--text", "@ok"], "--text needs a model folder with a tokenizer.json (--model tiny is a preset)"),
        (["--model", "nope", "--token-ids", "@ok"], "nope"),
    ],
)
def test_bad_input_is_one_line(tmp_path, capsys, argv, words):
    files = {
        "@ok": _write(tmp_path / "ok.json", [[1, 2]]),
        "@missing": str(tmp_path / "missing.json"),
        "@bad": str(tmp_path / "bad.json"),
        "@odd": _write(tmp_path / "odd.json", {"ids": [1]}),
        "@far": _write(tmp_path / "far.json", [[1, 600]]),
        "@empty": _write(tmp_path / "empty.json", [[]]),
    }
    (tmp_path / "bad.json").write_text("[[1,")
    argv = [files.get(a, a) for a in argv]
    size = [] if "--size" in argv else ["--size", "2"]
    assert main(["draft-vocab", *size, *argv, "--out", str(tmp_path / "o.json")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("specgen: error:") and words in err[-1], err
    assert not (tmp_path / "o.json").exists()
