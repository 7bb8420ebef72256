"""How a Hugging Face Qwen3 ``config.json`` and its tensor names map onto ``ModelConfig`` / ``Qwen3Model``.

``config_kwargs`` honours what the dense model implements (dimensions,
``rms_norm_eps``, the RoPE base from ``rope_parameters`` or an older file's
top-level ``rope_theta``, ``tie_word_embeddings``, ``max_position_embeddings`` as
the longest sequence) and refuses, naming the field
and value, anything that would change the forward and is not implemented here:
a RoPE type other than ``default``, ``rope_scaling``, sliding windows, attention
biases, another activation.  Fields that cannot change the forward (token ids,
dtype, bookkeeping) are listed as such; any other field is an error naming it,
so a checkpoint never loads as if its config said nothing.

Absent fields take transformers' ``Qwen3Config`` defaults (``head_dim`` 128,
RoPE base 10000, untied embeddings, eps 1e-6), which is what transformers
itself would run; without ``max_position_embeddings`` no limit is checked.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["config_kwargs", "param_name"]

# Hugging Face name -> ModelConfig field.
_FIELDS = {
    "num_hidden_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_kv_heads",
    "head_dim": "head_dim",
    "intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size",
    "rms_norm_eps": "rms_eps",
    "rope_theta": "rope_theta",  # files written before rope_parameters
    "tie_word_embeddings": "tie_embeddings",
    "max_position_embeddings": "max_positions",  # a limit the bench and generate check; RoPE is not scaled
}
# Dimensions a config must state.
_NEEDED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
# transformers' Qwen3Config defaults for the rest.
_DEFAULTS = {"head_dim": 128, "rms_eps": 1e-6, "rope_theta": 10000.0, "tie_embeddings": False}
# Fields this model implements one way only (``rope_scaling``: null or absent).
_REQUIRED = {
    "model_type": "qwen3",
    "hidden_act": "silu",
    "attention_bias": False,
    "use_sliding_window": False,
    "rope_scaling": None,
    "attention_dropout": 0.0,
}
# Fields that do not change the forward (with use_sliding_window false, transformers ignores the window).
_NO_EFFECT = frozenset(
    {
        "_name_or_path",
        "architectures",
        "transformers_version",
        "dtype",
        "torch_dtype",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "initializer_range",
        "use_cache",
        "sliding_window",
        "max_window_layers",
        "output_hidden_states",
        "output_attentions",
        "return_dict",
        "id2label",
        "label2id",
        "problem_type",
        "chunk_size_feed_forward",
        "is_encoder_decoder",
    }
)


def _refuse(key: str, value, want) -> None:
    raise ValueError(f"config.json field {key!r} is {value!r}; the Qwen3 loader implements only {want!r}")


def _unknown(key: str) -> ValueError:
    return ValueError(f"config.json field {key!r} is not understood by the Qwen3 loader")


def _rope(params) -> dict:
    """``rope_parameters``: plain RoPE only; its base."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ValueError(f"config.json field 'rope_parameters' is {params!r}; expected an object")
    out = {}
    for key, value in params.items():
        if key in ("rope_type", "type"):
            if value != "default":
                _refuse(f"rope_parameters.{key}", value, "default")
        elif key == "rope_theta":
            out["rope_theta"] = float(value)
        else:
            raise _unknown(f"rope_parameters.{key}")
    return out


def config_kwargs(config: Mapping, name: str) -> dict:
    """``ModelConfig`` keyword arguments for a Hugging Face Qwen3 config; see the module docstring."""
    if not isinstance(config, Mapping):
        raise ValueError("config.json does not hold an object")
    kw: dict = {"name": config.get("_name_or_path") or name}
    rope: dict = {}
    for key, value in config.items():
        if key in _FIELDS:
            if value is not None:
                kw[_FIELDS[key]] = value
        elif key == "rope_parameters":
            rope = _rope(value)
        elif key == "layer_types":
            for i, kind in enumerate(value or ()):
                if kind != "full_attention":
                    raise ValueError(
                        f"config.json field 'layer_types' is {kind!r} at layer {i}; the Qwen3 loader implements only "
                        "'full_attention'"
                    )
        elif key in _REQUIRED:
            if value != _REQUIRED[key]:
                _refuse(key, value, _REQUIRED[key])
        elif key not in _NO_EFFECT:
            raise _unknown(key)
    lacking = [k for k in _NEEDED if _FIELDS[k] not in kw]
    if lacking:
        raise ValueError(f"config.json lacks {', '.join(lacking)}")
    if "rope_theta" in rope:
        kw["rope_theta"] = rope["rope_theta"]  # the current field wins over an older one beside it
    kw.setdefault("num_kv_heads", kw["num_heads"])
    for key, value in _DEFAULTS.items():
        kw.setdefault(key, value)
    kw["tie_embeddings"] = bool(kw["tie_embeddings"])
    if "max_positions" in kw:
        kw["max_positions"] = int(kw["max_positions"])
    kw["rope_theta"], kw["rms_eps"] = float(kw["rope_theta"]), float(kw["rms_eps"])
    layer_types = config.get("layer_types")
    if layer_types is not None and len(layer_types) != kw["num_layers"]:
        raise ValueError(
            f"config.json field 'layer_types' names {len(layer_types)} layers; the model has {kw['num_layers']}"
        )
    return kw


def param_name(key: str) -> str:
    """The model's parameter name for a Hugging Face tensor name (``model.`` prefix or none)."""
    return key.removeprefix("model.")
