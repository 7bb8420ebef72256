"""The configuration of a Qwen3.5-style hybrid target, its presets, and how Hugging Face names map onto it.

``from_hf_dict`` reads a ``config.json`` (the text model's, or a full Qwen3.5
one holding it as ``text_config``) and refuses any field it does not know,
naming it: a checkpoint whose config says something this model does not do
(MoE experts, another activation, a scaled RoPE) must not
load as if it said nothing.  Fields that cannot change the text model's
forward (token ids, the vision tower, training settings) are listed as such.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

__all__ = ["FULL", "LINEAR", "PRESETS", "Qwen35Config", "hf_param_name"]

LINEAR, FULL = "linear_attention", "full_attention"


@dataclass(frozen=True, slots=True)
class Qwen35Config:
    """Dimensions of the hybrid; ``layer_types`` left empty means every ``full_attention_interval``-th
    layer (3, 7, 11, ...) is full attention and the rest are Gated DeltaNet layers."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 16
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    layer_types: tuple[str, ...] = ()
    full_attention_interval: int = 4
    partial_rotary_factor: float = 0.25
    rms_eps: float = 1e-6
    rope_theta: float = 1e7
    tie_embeddings: bool = True
    max_positions: int | None = None  # a checkpoint's max_position_embeddings (None: no stated limit)

    def __post_init__(self):
        every = self.full_attention_interval
        types = tuple(self.layer_types) or tuple(
            FULL if (i + 1) % every == 0 else LINEAR for i in range(self.num_layers)
        )
        if len(types) != self.num_layers or set(types) - {LINEAR, FULL}:
            raise ValueError(f"layer_types must name {self.num_layers} layers, each {LINEAR!r} or {FULL!r}: {types}")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError("linear_num_value_heads must be a multiple of linear_num_key_heads")
        object.__setattr__(self, "layer_types", types)

    @classmethod
    def preset(cls, name: str) -> "Qwen35Config":
        return PRESETS[name]

    @property
    def rotary_dim(self) -> int:
        """The leading dims of each attention head that RoPE rotates; the rest pass through."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def conv_dim(self) -> int:
        """Channels of the linear layers' causal conv: q, k and v side by side."""
        return 2 * self.linear_num_key_heads * self.linear_key_head_dim + (
            self.linear_num_value_heads * self.linear_value_head_dim
        )

    def layers_of(self, kind: str) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == kind)

    @classmethod
    def from_hf_dict(cls, config: Mapping, name: str = "qwen3.5") -> "Qwen35Config":
        """Read a Hugging Face Qwen3.5 config (text-only, or with ``text_config``); see the module docstring."""
        text, outer = _split(config)
        kw: dict = {"name": config.get("_name_or_path") or name}
        for key, value in text.items():
            if key in _FIELDS:
                kw[_FIELDS[key]] = tuple(value) if key == "layer_types" else value
            elif key == "rope_parameters":
                kw.update(_rope(value or {}))
            elif key in _REQUIRED:
                _check(key, value, _REQUIRED[key])
            elif key not in _NO_EFFECT:
                raise ValueError(f"config field {key!r} is not understood by the Qwen3.5 model")
        if outer:  # the vision-language model ties by its own field, as transformers does
            kw["tie_embeddings"] = outer.get("tie_word_embeddings", False)
        kw.setdefault("tie_embeddings", False)  # transformers' default for Qwen3.5
        lacking = [hf for hf, ours in _FIELDS.items() if ours in _NEEDED and ours not in kw]
        if lacking or "rope_theta" not in kw:
            raise ValueError(f"config lacks {lacking or ['rope_theta']}")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in kw.items() if k in known})


PRESETS: dict[str, Qwen35Config] = {
    # 3 linear + 1 full layer; two value heads per key head, so the grouping is exercised.  Its random
    # heads often output a near-zero vector, which the gated norm scales up to unit size: with eps 1e-6
    # that turns float32 rounding into logit errors of ~1e-3; 1e-2 keeps them ~3e-5, so CPU tests of
    # equal results can be tight.  (The real models' eps is 1e-6.)
    "qwen3.5-tiny": Qwen35Config(
        "qwen3.5-tiny",
        4,
        64,
        4,
        2,
        32,
        128,
        512,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=8,
        rms_eps=1e-2,
    ),
    "qwen3.5-0.8b": Qwen35Config("qwen3.5-0.8b", 24, 1024, 8, 2, 256, 3584, 248320),
    "qwen3.5-2b": Qwen35Config("qwen3.5-2b", 24, 2048, 8, 2, 256, 6144, 248320),
}

# Hugging Face text-config name -> Qwen35Config field.
_FIELDS = {
    "num_hidden_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "head_dim": "head_dim",
    "intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size",
    "linear_num_key_heads": "linear_num_key_heads",
    "linear_num_value_heads": "linear_num_value_heads",
    "linear_key_head_dim": "linear_key_head_dim",
    "linear_value_head_dim": "linear_value_head_dim",
    "linear_conv_kernel_dim": "linear_conv_kernel_dim",
    "layer_types": "layer_types",
    "full_attention_interval": "full_attention_interval",
    "partial_rotary_factor": "partial_rotary_factor",
    "rms_norm_eps": "rms_eps",
    "rope_theta": "rope_theta",
    "tie_word_embeddings": "tie_embeddings",
    "max_position_embeddings": "max_positions",  # a serving limit (RoPE is not scaled)
}
# Dimensions a config must state: their defaults differ between releases, so none is guessed.
_NEEDED = {f.name for f in fields(Qwen35Config)} - {
    "name",
    "layer_types",
    "full_attention_interval",
    "partial_rotary_factor",
    "rms_eps",
    "rope_theta",
    "tie_embeddings",
    "max_positions",
}
# Fields this model implements one way only: any other value is refused.
_REQUIRED = {"hidden_act": "silu", "attention_bias": False, "attn_output_gate": True, "mamba_ssm_dtype": "float32"}
# Fields that do not change the text model's forward.
_NO_EFFECT = frozenset(
    {
        "_name_or_path",
        "architectures",
        "model_type",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "initializer_range",
        "use_cache",
        "attention_dropout",  # inference: no dropout
        "mtp_num_hidden_layers",  # the MTP head's, read by the MTP draft
        "mtp_use_dedicated_embeddings",
        # text positions are equal in all three mRoPE rows, which is plain RoPE
        "mrope_section",
        "mrope_interleaved",
    }
)
# The full (vision-language) config's own fields around ``text_config``.
_OUTER = frozenset(
    {
        "_name_or_path",
        "architectures",
        "model_type",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "text_config",
        "vision_config",
        "image_token_id",
        "video_token_id",
        "vision_start_token_id",
        "vision_end_token_id",
        "tie_word_embeddings",
    }
)


def _split(config: Mapping) -> tuple[Mapping, Mapping]:
    """``(text fields, outer fields)``; a text-only config has no outer fields."""
    if "text_config" not in config:
        return config, {}
    for key in config:
        if key not in _OUTER:
            raise ValueError(f"config field {key!r} is not understood by the Qwen3.5 model")
    return config["text_config"], config


def _check(key: str, value, want) -> None:
    if value != want:
        raise ValueError(f"config field {key!r} is {value!r}; the Qwen3.5 model implements only {want!r}")


def _rope(params: Mapping) -> dict:
    """``rope_parameters``: plain RoPE only; theta and the rotated fraction."""
    out = {}
    for key, value in params.items():
        if key in ("rope_type", "type"):
            _check(f"rope_parameters.{key}", value, "default")
        elif key in ("rope_theta", "partial_rotary_factor"):
            out[key] = value
        elif key not in _NO_EFFECT:
            raise ValueError(f"config field 'rope_parameters.{key}' is not understood by the Qwen3.5 model")
    return out


def hf_param_name(key: str) -> str | None:
    """The model's parameter name for a Hugging Face tensor name, ``None`` for a tensor that belongs
    elsewhere: the MTP head's (``mtp.*``, loaded by the MTP draft) and the vision tower's."""
    if key.startswith(("mtp.", "model.visual.")):
        return None
    for prefix in ("model.language_model.", "model."):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key
