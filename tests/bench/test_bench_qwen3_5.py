"""``specgen bench`` over a Qwen3.5-style hybrid target: the presets and a Hugging Face Qwen3.5 folder.

Every mode and draft kind runs over the hybrid as over Qwen3 (its plans are the
hybrid's: ``draft-to-verify-linear``), the tokens are the target's own greedy
decoding, a folder's ``mtp.*`` tensors become the MTP draft, and what the bench
cannot take is one line naming it.
"""

from __future__ import annotations

import json

import pytest

from specgen.bench.config import configure
from specgen.bench.support import MODEL_PRESETS, BenchError
from specgen.cli import main
from specgen.models.qwen3_5_config import Qwen35Config

# a short sweep: the kernels of the hybrid_kernels fixture (bt8 bs16), no profiled steps
SHORT = ["--steps", "2", "--warmup", "1", "--device", "cpu", "--profile-steps", "0", "--bare-repeats", "2"]


def _folder(tmp_path, **kw):
    pytest.importorskip("transformers", reason="transformers is a test-only dependency")
    from oracles.hf_qwen3_5 import hf_qwen35_folder

    folder = tmp_path / "qwen35"
    folder.mkdir()
    hf_qwen35_folder(folder, **kw)
    return folder


def _bench(tmp_path, model: str, *argv: str) -> dict:
    out = tmp_path / "out"
    assert main(["bench", "--model", model, *SHORT, *argv, "--out", str(out)]) == 0
    return json.loads((out / "bench.json").read_text())


def _one_line_error(capsys, tmp_path, *argv: str) -> str:
    argv = (*argv, "--device", "cpu", "--modes", "baseline", "--profile-steps", "0", "--out", str(tmp_path / "out"))
    assert main(["bench", *argv]) == 2
    *progress, err = capsys.readouterr().err.splitlines()  # the bench's progress lines, then the error
    assert err.startswith("specgen: error: ") and all(line.startswith("bench: ") for line in progress), err
    return err


def test_the_hybrid_presets_configure():
    assert {"qwen3.5-tiny", "qwen3.5-0.8b", "qwen3.5-2b"} <= set(MODEL_PRESETS)
    c = configure(model="qwen3.5-tiny", device="cpu", modes=("baseline",))
    assert isinstance(c.model, Qwen35Config) and c.model_label == "qwen3.5-tiny" and c.model_path is None
    assert str(c.dtype) == "torch.float32"
    assert c.boundaries == ("draft-to-verify-linear", "verify-to-draft")
    assert configure(model="qwen3.5-tiny", device="cpu", draft="dflash").boundaries == (
        "draft-to-verify-linear",
        "context-kv",
    )
    assert configure(model="tiny", device="cpu").boundaries == ("draft-to-verify", "verify-to-draft")
    big = configure(model="qwen3.5-2b", device="cpu", modes=("baseline",))
    assert (big.model.hidden_size, big.model.vocab_size, big.model.num_layers) == (2048, 248320, 24)


def test_tensor_parallelism_of_a_hybrid_asks_the_sharding(tmp_path, capsys, monkeypatch):
    """``--tp`` over a hybrid: refused in one line where ``models/tp.py`` does not split hybrid targets
    (``shards_hybrid_targets``), else the shares must divide evenly, as for Qwen3."""
    from specgen.models import tp

    monkeypatch.setattr(tp, "shards_hybrid_targets", False, raising=False)
    with pytest.raises(BenchError, match="--tp 2: qwen3.5-tiny's linear-attention"):
        configure(model="qwen3.5-tiny", device="cpu", tp=2)
    assert "--tp 1" in _one_line_error(capsys, tmp_path, "--model", "qwen3.5-tiny", "--tp", "2")
    monkeypatch.setattr(tp, "shards_hybrid_targets", True, raising=False)
    with pytest.raises(BenchError, match=r"--tp 3: qwen3.5-tiny's query heads \(4\) does not divide evenly"):
        configure(model="qwen3.5-tiny", device="cpu", tp=3)


def test_bench_runs_the_tiny_hybrid_over_two_ranks(tmp_path):
    """``--tp 2`` launches two gloo ranks, where models/tp.py splits hybrid targets; the rank check holds."""
    from specgen.models import tp

    if not getattr(tp, "shards_hybrid_targets", False):
        pytest.skip("models/tp.py does not split hybrid targets")
    argv = ["--tp", "2", "--modes", "baseline", "--check", "--acceptance", "0.8", "--check-ranks", "1"]
    result = _bench(tmp_path, "qwen3.5-tiny", *argv)
    (run,) = result["runs"]
    assert result["tp"] == 2 and "error" not in run and run["equals_greedy"] and run["equals_target_reference"]


@pytest.mark.slow
@pytest.mark.parametrize("draft", ["mtp", "dflash"])
def test_bench_runs_the_tiny_hybrid_in_baseline_and_specgen(hybrid_kernels, tmp_path, draft):
    """Both modes decode plain greedy's tokens (``--check``) and, with ``--acceptance``, the target's own."""
    kernels = ["--kernels", str(hybrid_kernels.root), "--block-table-width", "8"]
    result = _bench(
        tmp_path,
        "qwen3.5-tiny",
        "--draft",
        draft,
        "--modes",
        "baseline,specgen",
        "--check",
        "--acceptance",
        "0.8",
        *kernels,
    )
    assert result["model"] == "qwen3.5-tiny" and result["draft"] == draft and not result["draft_from_checkpoint"]
    assert {r["mode"] for r in result["runs"]} == {"baseline", "specgen"}
    for r in result["runs"]:
        assert "error" not in r and r["equals_greedy"] and r["modes_agree"] and r["equals_target_reference"]
        assert r["acceptance"] > 0
    specgen = next(r for r in result["runs"] if r["mode"] == "specgen")
    assert specgen["runtime_stats"]["fallback"] == {} and specgen["runtime_stats"]["fast_path"] >= 1
    assert any("linear_state" in k or "hybrid" in k for k in specgen["runtime_stats"]["graph"])  # its linear head


@pytest.mark.slow
def test_bench_runs_a_transformers_qwen35_folder_with_its_mtp(hybrid_kernels, tmp_path):
    """A full (vision-language layout) Qwen3.5 folder with ``mtp.*`` tensors: the MTP draft is the
    checkpoint's, bench.json says so, and both modes decode the folder's greedy tokens."""
    folder = _folder(tmp_path, mtp=True, vision_language=True)
    kernels = ["--kernels", str(hybrid_kernels.root), "--block-table-width", "8"]
    result = _bench(tmp_path, str(folder), "--modes", "baseline,specgen", "--check", *kernels)
    assert result["model"] == str(folder.resolve()) and result["draft_from_checkpoint"]
    assert result["draft_weights"] is None and result["acceptance_p"] is None
    for r in result["runs"]:
        assert "error" not in r and r["equals_greedy"] and r["modes_agree"]


def test_bench_runs_a_transformers_qwen35_folder(tmp_path):
    """A text-only folder transformers wrote (``model_type: qwen3_5_text``), no mtp.* tensors: a random
    Qwen3.5-style MTP head, the folder's greedy tokens."""
    folder = _folder(tmp_path)
    result = _bench(tmp_path, str(folder), "--modes", "baseline", "--check")
    assert result["model"] == str(folder.resolve()) and not result["draft_from_checkpoint"]
    (run,) = result["runs"]
    assert "error" not in run and run["equals_greedy"]


def test_what_the_loader_does_not_understand_is_one_line(tmp_path, capsys):
    folder = _folder(tmp_path, mtp=True)
    capsys.readouterr()  # transformers' progress lines
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_experts": 8}))
    err = _one_line_error(capsys, tmp_path, "--model", str(folder))
    assert f"--model {folder}" in err and "'num_experts' is not understood by the Qwen3.5 model" in err
    full = {"model_type": "qwen3_5", "text_config": config, "audio_config": {}}
    (folder / "config.json").write_text(json.dumps(full))
    assert "'audio_config'" in _one_line_error(capsys, tmp_path, "--model", str(folder))
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 40}))
    assert "max_position_embeddings 40" in _one_line_error(capsys, tmp_path, "--model", str(folder))

    from specgen.models.checkpoint import load_file, save_file

    (folder / "config.json").write_text(json.dumps(config))
    mtp = load_file(folder / "model-mtp.safetensors")
    save_file({**mtp, "mtp.layers.1.mlp.up_proj.weight": mtp["mtp.fc.weight"]}, folder / "model-mtp.safetensors")
    err = _one_line_error(capsys, tmp_path, "--model", str(folder))
    assert "'mtp.layers.1.mlp.up_proj.weight' has no place in the Qwen3.5 MTP head" in err
