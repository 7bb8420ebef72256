"""A folder written by transformers (``save_pretrained``) loads and decodes transformers' own greedy tokens."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is a test-only dependency")

from oracles.hf_checkpoint import hf_folder, hf_greedy  # noqa: E402

from specgen.engine import SpecDecodeEngine, greedy_generate  # noqa: E402
from specgen.models import ModelConfig, MTPHead, Qwen3Model  # noqa: E402

NEW = 10
PROMPTS = [[5], [17, 3, 200, 41], [9, 9, 9, 100, 2, 77, 31], list(range(40, 60))]


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("rope_theta", [5e5, 1e4])
def test_greedy_equals_transformers(tmp_path, tied, rope_theta):
    hf = hf_folder(tmp_path, tied, rope_theta)
    model = Qwen3Model.from_pretrained(tmp_path)
    cfg = model.config
    assert (cfg.tie_embeddings, cfg.rope_theta, cfg.head_dim, cfg.max_positions) == (tied, rope_theta, 16, 32768)
    assert hasattr(model, "lm_head") != tied
    if not tied:
        assert torch.equal(model.lm_head.weight, hf.lm_head.weight)
    want = hf_greedy(hf, PROMPTS, NEW)
    assert greedy_generate(model, PROMPTS, NEW) == want
    assert len({t for row in want for t in row}) > 10  # not a stuck decode
    # the base is really read: the same weights under another base decode other tokens
    other = {**_config(tmp_path), "rope_theta": 1e6}
    wrong = Qwen3Model.create(ModelConfig.from_hf_dict(other), None)
    wrong.load_safetensors(tmp_path)
    assert greedy_generate(wrong, PROMPTS, NEW) != want


def _config(folder) -> dict:
    c = json.loads((folder / "config.json").read_text())
    c.pop("rope_parameters")
    return c


def test_baseline_engine_equals_greedy(tmp_path):
    hf = hf_folder(tmp_path, tied=False, rope_theta=5e5)
    model = Qwen3Model.from_pretrained(tmp_path)
    head = MTPHead.create(model, seed=1)
    engine = SpecDecodeEngine(
        model, head, mode="baseline", width=4, batch=len(PROMPTS), block_size=16, block_table_width=8
    )
    res = engine.run(PROMPTS, max_new_tokens=NEW)
    assert res.outputs == greedy_generate(model, PROMPTS, NEW) == hf_greedy(hf, PROMPTS, NEW)
    assert res.drafted > 0  # verification steps of W = 4 rows ran


def test_tensors_with_and_without_prefix(tmp_path):
    from specgen.models.checkpoint import load_folder, save_file

    hf_folder(tmp_path, tied=True, rope_theta=1e4)
    tensors = load_folder(tmp_path)
    bare = {k.removeprefix("model."): v for k, v in tensors.items()}
    model = Qwen3Model.create(ModelConfig.from_hf(tmp_path), None)
    model.load_hf_state_dict(bare)
    assert torch.equal(model.norm.weight, tensors["model.norm.weight"])
    with pytest.raises(KeyError, match="model.layers.9.mlp.up_proj.weight"):
        model.load_hf_state_dict({**tensors, "model.layers.9.mlp.up_proj.weight": tensors["model.norm.weight"]})
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    (tmp_path / "model.safetensors").unlink()
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(KeyError, match="layers.1.self_attn.k_norm.weight"):
        Qwen3Model.from_pretrained(tmp_path)


def test_older_config_rope_theta(tmp_path):
    hf_folder(tmp_path, tied=True, rope_theta=5e5)
    c = _config(tmp_path)
    c.update(rope_theta=5e5, torch_dtype="bfloat16", rope_scaling=None)
    assert ModelConfig.from_hf_dict(c).rope_theta == 5e5


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}},
            "'rope_parameters.rope_type' is 'yarn'",
        ),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "'rope_scaling' is {'type': 'linear'"),
        ({"foo": 1}, "^config.json field 'foo' is not understood by the Qwen3 loader$"),
        ({"quantization_config": {"bits": 4}}, "'quantization_config' is not understood"),
        ({"rope_parameters": {"rope_theta": 1e4, "factor": 2.0}}, "'rope_parameters.factor' is not understood"),
        ({"attention_dropout": 0.1}, "'attention_dropout' is 0.1"),
        ({"use_sliding_window": True}, "'use_sliding_window' is True"),
        ({"attention_bias": True}, "'attention_bias' is True"),
        ({"hidden_act": "gelu"}, "'hidden_act' is 'gelu'"),
        ({"layer_types": ["full_attention", "sliding_attention"]}, "'layer_types' is 'sliding_attention' at layer 1"),
        ({"model_type": "llama"}, "'model_type' is 'llama'"),
    ],
)
def test_unsupported_fields_are_one_line_errors(tmp_path, change, message):
    hf_folder(tmp_path, tied=True, rope_theta=1e4)
    config = {**json.loads((tmp_path / "config.json").read_text()), **change}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=message) as err:
        Qwen3Model.from_pretrained(tmp_path)
    assert "\n" not in str(err.value)
