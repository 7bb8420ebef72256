"""Hugging Face Qwen3.5 folders written by transformers itself, with or without a checkpoint's MTP module.

``hf_qwen35_folder`` copies the seeded ``qwen3.5-tiny`` preset's weights into
transformers' ``Qwen3_5ForCausalLM`` and ``save_pretrained``s it (``config.json``
with ``model_type: qwen3_5_text``, safetensors).  With ``vision_language`` the
folder reads as a full Qwen3.5 checkpoint instead: the config under
``text_config`` and the tensors under ``model.language_model.``, beside a
vision-tower tensor.  ``mtp_tensors`` are seeded ``mtp.*`` tensors of the MTP
module, named and shaped as the released checkpoints name them; transformers
does not run them, so they are written beside its file.  The callers
``pytest.importorskip`` transformers first.
"""

from __future__ import annotations

import json

import torch

from specgen.models.checkpoint import load_folder, save_file
from specgen.models.qwen3_5 import Qwen35Config, Qwen35Model

__all__ = ["hf_qwen35_folder", "mtp_tensors"]

PRESET = "qwen3.5-tiny"


def mtp_tensors(cfg: Qwen35Config, seed: int = 5) -> dict[str, torch.Tensor]:
    """Seeded ``mtp.*`` tensors for ``cfg``: zero-centred norm gains near zero (gain near one), projections
    at unit gain, and a final norm that spreads the tied head's logits (about 4) as the target's does."""
    h, d, i = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    q, kv = cfg.num_heads * d, cfg.num_kv_heads * d
    layer = "mtp.layers.0."
    shapes = {
        "mtp.fc.weight": (h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": (h,),
        "mtp.pre_fc_norm_hidden.weight": (h,),
        layer + "input_layernorm.weight": (h,),
        layer + "self_attn.q_proj.weight": (2 * q, h),  # per head: query, then its gate
        layer + "self_attn.k_proj.weight": (kv, h),
        layer + "self_attn.v_proj.weight": (kv, h),
        layer + "self_attn.o_proj.weight": (h, q),
        layer + "self_attn.q_norm.weight": (d,),
        layer + "self_attn.k_norm.weight": (d,),
        layer + "post_attention_layernorm.weight": (h,),
        layer + "mlp.gate_proj.weight": (i, h),
        layer + "mlp.up_proj.weight": (i, h),
        layer + "mlp.down_proj.weight": (h, i),
        "mtp.norm.weight": (h,),
    }
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            out[name] = 0.1 * torch.randn(shape, generator=gen)
        else:
            out[name] = torch.randn(shape, generator=gen) / shape[1] ** 0.5
    out["mtp.norm.weight"] += 4.0 / (0.02 * h**0.5) - 1.0  # the preset's embeddings have std 0.02
    return out


def hf_text_config(cfg):
    """transformers' ``Qwen3_5TextConfig`` of a ``Qwen35Config`` (partial RoPE on a quarter of each head)."""
    import transformers

    return transformers.Qwen3_5TextConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        linear_num_key_heads=cfg.linear_num_key_heads,
        linear_num_value_heads=cfg.linear_num_value_heads,
        linear_key_head_dim=cfg.linear_key_head_dim,
        linear_value_head_dim=cfg.linear_value_head_dim,
        linear_conv_kernel_dim=cfg.linear_conv_kernel_dim,
        rms_norm_eps=cfg.rms_eps,
        tie_word_embeddings=cfg.tie_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta, "partial_rotary_factor": 0.25},
    )


def hf_qwen35_folder(folder, mtp: bool = False, vision_language: bool = False, seed: int = 0):
    """The ``qwen3.5-tiny`` preset (``seed``) saved by transformers to ``folder``; returns transformers' model
    and the ``mtp.*`` tensors written (empty without ``mtp``)."""
    import transformers

    ours = Qwen35Model.create(PRESET, seed=seed)
    cfg = ours.config
    config = hf_text_config(cfg)
    model = transformers.Qwen3_5ForCausalLM._from_config(config, attn_implementation="eager", dtype=torch.float32)
    state = {f"model.{k}": v for k, v in ours.state_dict().items()}
    model.load_state_dict({**state, "lm_head.weight": ours.embed_tokens.weight}, strict=True)
    model = model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    if vision_language:
        text = json.loads((folder / "config.json").read_text())
        full = {"model_type": "qwen3_5", "text_config": text, "tie_word_embeddings": True, "vision_config": {}}
        (folder / "config.json").write_text(json.dumps(full))
        tensors = {"model.language_model." + k.removeprefix("model."): v for k, v in load_folder(folder).items()}
        tensors["model.visual.blocks.0.attn.qkv.weight"] = torch.zeros(3, 4)
        for f in folder.glob("*.safetensors"):
            f.unlink()
        save_file(tensors, folder / "model.safetensors")
    extra = mtp_tensors(cfg, seed + 5) if mtp else {}
    if extra:
        save_file(extra, folder / "model-mtp.safetensors")
    return model, extra
