"""``specgen generate`` over a Qwen3.5-style hybrid target: the tokens are the target's own greedy decoding,
for the tiny preset and a folder transformers wrote (its ``mtp.*`` tensors the MTP draft's weights)."""

from __future__ import annotations

import json

import pytest
from oracles.hybrid_reference import hybrid_greedy

from specgen.cli import main
from specgen.engine import greedy_generate
from specgen.models.qwen3_5 import Qwen35Model

PROMPTS = [[5], [17, 3, 200, 41, 9, 9, 300]]
NEW = 9


def _generate(capsys, *argv: str) -> dict:
    args = ["generate", *argv, "--max-new-tokens", str(NEW), "--device", "cpu", "--json"]
    for p in PROMPTS:
        args += ["--prompt-ids", ",".join(map(str, p))]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _folder(tmp_path, capsys):
    pytest.importorskip("transformers", reason="transformers is a test-only dependency")
    from oracles.hf_qwen3_5 import hf_qwen35_folder

    folder = tmp_path / "qwen35"
    folder.mkdir()
    hf, _ = hf_qwen35_folder(folder, mtp=True)
    capsys.readouterr()  # transformers' progress lines
    return folder, hf


@pytest.mark.parametrize("draft", ["mtp", "dspark"])
def test_generate_the_tiny_hybrid_equals_greedy(capsys, draft):
    doc = _generate(capsys, "--model", "qwen3.5-tiny", "--draft", draft)
    model = Qwen35Model.create("qwen3.5-tiny", seed=0)
    assert doc["outputs"] == greedy_generate(model, PROMPTS, NEW) == hybrid_greedy(model, PROMPTS, NEW)
    assert doc["draft"] == draft and 0.0 <= doc["acceptance"] <= 1.0


def test_generate_a_transformers_qwen35_folder_equals_its_generate(tmp_path, capsys):
    """The folder's tokens are transformers' greedy ``generate`` and our own plain greedy decoding."""
    from oracles.hf_checkpoint import hf_greedy

    folder, hf = _folder(tmp_path, capsys)
    doc = _generate(capsys, "--model", str(folder), "--depth", "2")
    ours = Qwen35Model.from_pretrained(folder)
    assert doc["outputs"] == greedy_generate(ours, PROMPTS, NEW) == hf_greedy(hf, PROMPTS, NEW)


def test_generate_refuses_an_unknown_config_field_in_one_line(tmp_path, capsys):
    folder, _ = _folder(tmp_path, capsys)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "linear_gate_bias": True}))
    assert main(["generate", "--model", str(folder), "--prompt-ids", "1,2", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'linear_gate_bias' is not understood by the Qwen3.5 model" in err


@pytest.mark.slow
@pytest.mark.parametrize("model", ["qwen3.5-tiny", "hf"])
def test_generate_the_hybrid_in_specgen_mode_equals_greedy(hybrid_kernels, tmp_path, capsys, model):
    """The specgen mode runs the hybrid's plans from the kernel folder's layout (bt8 bs16)."""
    folder = str(_folder(tmp_path, capsys)[0]) if model == "hf" else model
    kernels = ["--kernels", str(hybrid_kernels.root)]
    doc = _generate(capsys, "--model", folder, "--mode", "specgen", "--depth", "3", *kernels)
    target = Qwen35Model.create(model, seed=0) if model != "hf" else Qwen35Model.from_pretrained(folder)
    assert doc["outputs"] == greedy_generate(target, PROMPTS, NEW) and doc["mode"] == "specgen"
    assert doc["layout"] == {"block_table_width": 8, "block_size": 16}
    assert doc["runtime_stats"]["fallback"] == {} and doc["runtime_stats"]["fast_path"] >= 1
