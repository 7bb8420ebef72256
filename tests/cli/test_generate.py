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


def _generate(capsys, *argv, prompts=PROMPTS) -> dict:
    args = ["generate", *argv, "--max-new-tokens", "9", "--device", "cpu", "--json"]
    for p in prompts:
        args += ["--prompt-ids", ",".join(map(str, p))]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _hf_folder(tmp_path, tokenizer: bool = False):
    """A folder transformers wrote (and, with ``tokenizer``, a word-level tokenizer.json); its model."""
    pytest.importorskip("transformers", reason="transformers is a test-only dependency")
    from oracles.hf_checkpoint import hf_folder, word_tokenizer

    folder = tmp_path / "hf"
    hf = hf_folder(folder, tied=False, rope_theta=5e5)
    if tokenizer:
        pytest.importorskip("tokenizers", reason="--prompt TEXT needs the tokenizers package")
        word_tokenizer(folder)
    return folder, hf


@pytest.mark.parametrize("depth", [1, 3])
def test_generate_a_preset_equals_greedy(capsys, depth):
    doc = _generate(capsys, "--model", "tiny", "--depth", str(depth))
    assert doc["outputs"] == greedy_generate(Qwen3Model.create("tiny", seed=0), PROMPTS, 9)
    assert 0.0 <= doc["acceptance"] <= 1.0 and doc["tokens"] == 18 and doc["mode"] == "baseline"
    assert doc["texts"] is None  # a preset has no tokenizer


def test_generate_a_folder_equals_greedy(tmp_path, capsys):
    src = write_folder(tmp_path / "ckpt")
    doc = _generate(capsys, "--model", str(tmp_path / "ckpt"))
    assert doc["outputs"] == greedy_generate(src, PROMPTS, 9)
    assert main(["generate", "--model", "tiny", "--prompt-ids", "5,6", "--max-new-tokens", "4", "--device", "cpu"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("prompt 0: 5,6 -> ") and "tokens/s" in text


def test_generate_a_transformers_folder_equals_its_generate(tmp_path, capsys):
    from oracles.hf_checkpoint import hf_greedy

    folder, hf = _hf_folder(tmp_path)
    prompts = [[5], [17, 3, 200, 41]]
    doc = _generate(capsys, "--model", str(folder), prompts=prompts)
    ours = greedy_generate(Qwen3Model.from_pretrained(folder), prompts, 9)
    assert doc["outputs"] == ours == hf_greedy(hf, prompts, 9)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny", "hf"])
def test_generate_in_specgen_mode_equals_greedy(engine_kernels, tmp_path, capsys, model):
    """The specgen mode picks the kernel folder's layout that holds the sequences and runs on it."""
    folder = str(_hf_folder(tmp_path)[0]) if model == "hf" else "tiny"
    prompts = [[5], [17, 3, 200, 41]]
    kernels = ["--kernels", str(engine_kernels.root)]
    doc = _generate(capsys, "--model", folder, "--mode", "specgen", "--depth", "2", *kernels, prompts=prompts)
    target = Qwen3Model.create("tiny", seed=0) if model == "tiny" else Qwen3Model.from_pretrained(folder)
    assert doc["outputs"] == greedy_generate(target, prompts, 9) and doc["mode"] == "specgen"
    assert doc["layout"] == {"block_table_width": 8, "block_size": 16}  # the folder's layout, not a new one
    assert doc["runtime_stats"]["fallback"] == {} and doc["runtime_stats"]["fast_path"] >= 1


def test_generate_a_text_prompt_through_the_tokenizer(tmp_path, capsys):
    folder, _ = _hf_folder(tmp_path, tokenizer=True)
    argv = ["generate", "--model", str(folder), "--prompt", "w5 w17 w3", "--prompt-ids", "9,9"]
    assert main([*argv, "--max-new-tokens", "6", "--device", "cpu", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["prompts"] == [[5, 17, 3], [9, 9]]
    assert doc["outputs"] == greedy_generate(Qwen3Model.from_pretrained(folder), [[5, 17, 3], [9, 9]], 6)
    assert doc["texts"] == [" ".join(f"w{t}" for t in o) for o in doc["outputs"]]
    assert main([*argv, "--max-new-tokens", "3", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("prompt 0: 5,17,3 -> ") and lines[1].startswith("  text: 'w")


def test_generate_text_prompt_errors(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "ckpt"
    write_folder(folder)
    cases = [
        (["--model", "tiny"], "--prompt needs a model folder with a tokenizer.json (--model tiny is a preset)"),
        (["--model", str(folder)], f"({folder} has no tokenizer.json); use --prompt-ids"),
    ]
    (tmp_path / "tok").mkdir()
    write_folder(tmp_path / "tok")
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as where the package is not installed
    cases.append((["--model", str(tmp_path / "tok")], "--prompt needs the tokenizers package"))
    for argv, message in cases:
        assert main(["generate", *argv, "--prompt", "hello", "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "nowhere"], "unknown --model 'nowhere'"),
        (["--prompt-ids", "1,99999"], "token 99999 is outside the vocabulary"),
        (["--mode", "turbo"], "unknown --mode 'turbo'"),
        (["--mode", "compile"], "--mode compile needs CUDA"),
        (["--draft", "medusa"], "unknown --draft 'medusa'"),
    ],
)
def test_generate_errors_are_one_line(capsys, argv, message):
    assert main(["generate", "--prompt-ids", "1,2", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_generate_without_a_prompt_or_with_an_unknown_config_field(tmp_path, capsys):
    assert main(["generate", "--device", "cpu"]) == 2
    assert "give at least one prompt" in capsys.readouterr().err
    folder = tmp_path / "ckpt"
    write_folder(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "foo": 1}))
    assert main(["generate", "--model", str(folder), "--prompt-ids", "1", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err == f"specgen: error: --model {folder}: config.json field 'foo' is not understood by the Qwen3 loader\n"
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 12}))
    assert main(["generate", "--model", str(folder), "--prompt-ids", "1,2,3", "--max-new-tokens", "10"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-new-tokens 10 pass the model's max_position_embeddings 12" in err


def test_generate_samples_reproducibly_in_every_mode(tmp_path, capsys, sampling_kernels):
    """``--temperature`` / ``--top-k`` / ``--top-p`` / ``--seed``: baseline (the host rule) and specgen give the same
    tokens; the same seed repeats them, another seed changes them; temperature 0 is greedy decoding."""
    argv = ("--model", "tiny", "--temperature", "0.9", "--top-k", "50", "--top-p", "0.95", "--seed", "7")
    mode_base, mode_spec = ("--mode", "baseline"), ("--mode", "specgen", "--kernels", str(sampling_kernels.root))
    base = _generate(capsys, *argv)
    assert base["sampling"] == {"temperature": 0.9, "top_k": 50, "top_p": 0.95, "seed": 7, "draft_sampling": "sample"}
    assert _generate(capsys, *argv)["outputs"] == base["outputs"]
    spec = _generate(capsys, *argv, "--mode", "specgen", "--kernels", str(sampling_kernels.root))
    assert spec["outputs"] == base["outputs"] and spec["runtime_stats"]["fallback"] == {}
    argmax = [_generate(capsys, *argv, "--draft-sampling", "argmax", *m) for m in (mode_base, mode_spec)]
    assert argmax[0]["outputs"] == argmax[1]["outputs"]  # argmax drafts: the modes agree too
    assert _generate(capsys, *argv[:-1], "8")["outputs"] != base["outputs"]
    greedy = _generate(capsys, "--model", "tiny", "--temperature", "0", "--top-k", "5")
    assert greedy["sampling"] is None and greedy["outputs"] == greedy_generate(
        Qwen3Model.create("tiny", seed=0), PROMPTS, 9
    )
