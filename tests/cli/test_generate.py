"""``specgen generate``: the tokens are plain greedy decoding's, for a preset and a checkpoint folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from specgen.cli import main
from specgen.engine import greedy_generate
from specgen.models import Qwen3Model

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
from test_bench_checkpoint import write_folder  # noqa: E402

PROMPTS = [[1, 2, 3], [40, 7, 300, 9, 9]]


def _generate(capsys, *argv) -> dict:
    args = ["generate", *argv, "--max-new-tokens", "9", "--device", "cpu", "--json"]
    for p in PROMPTS:
        args += ["--prompt-ids", ",".join(map(str, p))]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("depth", [1, 3])
def test_generate_a_preset_equals_greedy(capsys, depth):
    doc = _generate(capsys, "--model", "tiny", "--depth", str(depth))
    assert doc["outputs"] == greedy_generate(Qwen3Model.create("tiny", seed=0), PROMPTS, 9)
    assert 0.0 <= doc["acceptance"] <= 1.0 and doc["tokens"] == 18 and doc["mode"] == "baseline"


def test_generate_a_folder_equals_greedy(tmp_path, capsys):
    src = write_folder(tmp_path / "ckpt")
    doc = _generate(capsys, "--model", str(tmp_path / "ckpt"))
    assert doc["outputs"] == greedy_generate(src, PROMPTS, 9)
    assert main(["generate", "--model", "tiny", "--prompt-ids", "5,6", "--max-new-tokens", "4", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("prompt 0: 5,6 -> ") and "tokens/s" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "nowhere"], "unknown --model 'nowhere'"),
        (["--prompt-ids", "1,99999"], "token 99999 is outside the vocabulary"),
        (["--mode", "turbo"], "unknown --mode 'turbo'"),
        (["--mode", "specgen"], "--mode specgen runs built kernels"),
    ],
)
def test_generate_errors_are_one_line(capsys, argv, message):
    assert main(["generate", "--prompt-ids", "1,2", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
