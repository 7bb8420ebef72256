"""``specgen bench --model DIR``: a local Hugging Face Qwen3 folder in place of a preset."""

from __future__ import annotations

import json

import pytest
import torch

from specgen.cli import main
from specgen.models import ModelConfig, Qwen3Model
from specgen.models.checkpoint import save_file

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 512,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 5e5},
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "dtype": "float32",
    "transformers_version": "5.24.0",
}


def write_folder(folder, seed: int = 3) -> Qwen3Model:
    """The tiny preset's shapes as a transformers-style folder (``rope_parameters``, untied head)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    model = Qwen3Model.create(ModelConfig.from_hf_dict(CONFIG, "tiny-hf"), seed)
    tensors = {k if k.startswith("lm_head") else f"model.{k}": v for k, v in model.named_parameters()}
    save_file(tensors, folder / "model.safetensors")
    return model


def test_bench_runs_a_checkpoint_folder(tmp_path, capsys):
    folder, out = tmp_path / "ckpt", tmp_path / "out"
    write_folder(folder)
    argv = ["bench", "--model", str(folder), "--steps", "2", "--modes", "baseline", "--device", "cpu"]
    assert main([*argv, "--out", str(out)]) == 0
    result = json.loads((out / "bench.json").read_text())
    assert result["model"] == str(folder.resolve()) and result["dtype"] == "float32"
    assert result["runs"] and all(r["mode"] == "baseline" and "error" not in r for r in result["runs"])


def test_bench_model_folder_errors(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["bench", "--model", str(empty), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--model {empty}: the folder has no config.json" in err
    folder = tmp_path / "ckpt"
    write_folder(folder)
    (folder / "config.json").write_text(json.dumps({**CONFIG, "use_sliding_window": True}))
    assert main(["bench", "--model", str(folder), "--device", "cpu", "--modes", "baseline"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'use_sliding_window' is True" in err
    (folder / "config.json").write_text(json.dumps({**CONFIG, "max_position_embeddings": 64}))
    assert main(["bench", "--model", str(folder), "--device", "cpu", "--modes", "baseline"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "positions (--prompt-len, --steps" in err and "max_position_embeddings 64" in err


def test_bench_loads_the_folder_weights_in_its_dtype(tmp_path):
    from specgen.bench.config import configure
    from specgen.bench.support import load_target

    folder = tmp_path / "ckpt"
    src = write_folder(folder)
    config = configure(model=str(folder), device="cpu", dtype="bfloat16", modes=("baseline",))
    target = load_target(config, torch.device("cpu"))
    assert target.lm_head.weight.dtype == torch.bfloat16
    assert torch.equal(target.lm_head.weight, src.lm_head.weight.to(torch.bfloat16))
    assert target.config.rope_theta == 5e5


@pytest.mark.slow
def test_bench_runs_a_transformers_folder_in_both_modes(engine_kernels, tmp_path):
    """A folder transformers wrote, baseline and specgen side by side: both decode plain greedy's tokens."""
    pytest.importorskip("transformers", reason="transformers is a test-only dependency")
    from oracles.hf_checkpoint import hf_folder

    folder, out = tmp_path / "hf", tmp_path / "out"
    hf_folder(folder, tied=True, rope_theta=1e4)
    argv = ["bench", "--model", str(folder), "--steps", "2", "--modes", "baseline,specgen", "--device", "cpu"]
    argv += ["--kernels", str(engine_kernels.root), "--block-table-width", "8", "--profile-steps", "0", "--check"]
    assert main([*argv, "--out", str(out)]) == 0
    result = json.loads((out / "bench.json").read_text())
    assert result["model"] == str(folder.resolve()) and result["acceptance_p"] is None
    assert {r["mode"] for r in result["runs"]} == {"baseline", "specgen"}
    for r in result["runs"]:
        assert "error" not in r and r["equals_greedy"] and r["modes_agree"]
        assert 0.0 <= r["acceptance"] <= 1.0  # the MTP head's own drafts against the checkpoint's tokens
    specgen = next(r for r in result["runs"] if r["mode"] == "specgen")
    assert specgen["runtime_stats"]["fallback"] == {} and specgen["runtime_stats"]["fast_path"] >= 1
