"""A Qwen3-style decoder over a paged KV cache, with a fixed-shape forward.

The forward reads only tensors whose shapes depend on the batch layout
(``N`` rows, ``B`` sequences, ``rows_per_seq``, ``BT``) and never on their
values, so it can be captured once in a CUDA graph and replayed over
persistent metadata buffers::

    model = Qwen3Model(ModelConfig.preset("tiny"), seed=0)
    model.allocate_kv_cache(num_blocks=64, block_size=16)
    hidden, logits = model(tokens, positions, slot_mapping, block_table,
                           kv_lens, query_start_loc, rows_per_seq=W)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import cuda_forward
from .checkpoint import load_folder
from .cuda_forward import FastBatch
from .paged_kv import AttentionBatch, PagedKVCache
from .qwen3_hf import config_kwargs, param_name

# Random embeddings are kept small beside the layers' output so the residual
# stream is not dominated by the input token; with tied weights that would
# make every token predict itself.  The final-norm gain restores a logit
# spread of about LOGIT_STD, so greedy choices are neither flat nor stuck.
EMBED_STD = 0.02
LOGIT_STD = 4.0


@dataclass(frozen=True, slots=True)
class ModelConfig:
    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_eps: float = 1e-6
    rope_theta: float = 1e6
    tie_embeddings: bool = True
    max_positions: int | None = None  # a checkpoint's max_position_embeddings (None: no stated limit)

    @classmethod
    def preset(cls, name: str) -> "ModelConfig":
        return PRESETS[name]

    @classmethod
    def from_hf(cls, folder: str | Path) -> "ModelConfig":
        """Read a Hugging Face Qwen3 ``config.json``; a field it does not honour is an error naming it."""
        path = Path(folder) / "config.json"
        try:
            config = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: cannot read it ({e})") from None
        return cls.from_hf_dict(config, Path(folder).name)

    @classmethod
    def from_hf_dict(cls, config: Mapping, name: str = "qwen3") -> "ModelConfig":
        """A Hugging Face Qwen3 config dict (``qwen3_hf.config_kwargs``)."""
        return cls(**config_kwargs(config, name))


PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig("tiny", 2, 64, 4, 2, 16, 128, 512),
    "qwen3-0.6b": ModelConfig("qwen3-0.6b", 28, 1024, 16, 8, 128, 3072, 151936),
    "qwen3-8b": ModelConfig("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, tie_embeddings=False),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one fused kernel where torch has it; the mean of squares is taken in float32
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on ``x [N, heads, D]`` with tables ``[N, D]``."""
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (xf * cos[:, None] + rotated * sin[:, None]).to(x.dtype)


def partial_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first ``cos.shape[-1]`` dims of ``x [N, heads, D]``; the rest pass."""
    rd = cos.shape[-1]
    return torch.cat([apply_rope(x[..., :rd], cos, sin), x[..., rd:]], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_eps)
        self.k_norm = RMSNorm(d, cfg.rms_eps)

    def forward(self, x, batch: AttentionBatch, cache: PagedKVCache, layer: int):
        n = x.shape[0]
        q = self.q_norm(self.q_proj(x).view(n, self.num_heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(n, self.num_kv_heads, self.head_dim))
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        qk = apply_rope(torch.cat([q, k], dim=1), batch.cos, batch.sin)  # one rotation for both
        q, k = qk[:, : self.num_heads], qk[:, self.num_heads :]
        return self.o_proj(batch.attend(cache, layer, q, k, v).reshape(n, -1))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, batch: AttentionBatch | FastBatch, cache: PagedKVCache, layer: int):
        if isinstance(batch, FastBatch):
            return cuda_forward.materialize(*cuda_forward.layer(self, x, None, batch, cache, layer))
        x = x + self.self_attn(self.input_layernorm(x), batch, cache, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


def attention_batch(
    kernels: str,
    positions,
    slot_mapping,
    block_table,
    kv_lens,
    query_start_loc,
    rows_per_seq: int,
    head_dim: int,
    rope_theta: float,
) -> AttentionBatch | FastBatch:
    """The per-forward metadata for the forward that ``kernels`` picks on this device."""
    if cuda_forward.use_triton(kernels, positions.device):
        return FastBatch(positions, slot_mapping, block_table, kv_lens, query_start_loc, rows_per_seq, rope_theta)
    return AttentionBatch.build(
        positions, slot_mapping, block_table, kv_lens, query_start_loc, rows_per_seq, head_dim, rope_theta
    )


def init_random_weights(module: nn.Module, seed: int) -> None:
    """Seeded weights drawn on the CPU, so every device and dtype sees the same model."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                w = torch.ones(p.shape)
            elif p.dim() == 2 and "embed" in name:
                w = torch.randn(p.shape, generator=gen) * EMBED_STD
            else:
                w = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1])
            p.copy_(w)


def draft_config(target) -> ModelConfig:
    """The dense config a draft's layers take over ``target``: its own for a Qwen3 target, the hybrid's
    ``draft_config`` for a hybrid one."""
    return getattr(target, "draft_config", target.config)


def build_on(module_factory, dtype: torch.dtype, device) -> nn.Module:
    """Construct a module without default initialisation, then place it."""
    with torch.device("meta"):
        module = module_factory()
    return module.to_empty(device=device).to(dtype) if str(device) != "meta" else module.to(dtype)


class Qwen3Model(nn.Module):
    """Qwen3 decoder; ``forward`` returns the pre-norm hidden state and logits.

    ``forward_kernels`` picks the forward (``fast_forward``): ``"auto"`` runs the
    fused Triton forward on CUDA and the exact torch one elsewhere.
    """

    forward_kernels = "auto"

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_eps)
        if not config.tie_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.kv_cache: PagedKVCache | None = None

    @classmethod
    def create(
        cls, config: ModelConfig | str, seed: int | None = 0, dtype: torch.dtype = torch.float32, device="cpu"
    ) -> "Qwen3Model":
        """Random-weight model (``seed=None`` leaves weights unset, for loading)."""
        cfg = ModelConfig.preset(config) if isinstance(config, str) else config
        model = build_on(lambda: cls(cfg), dtype, device)
        if seed is not None and str(device) != "meta":
            init_random_weights(model, seed)
            with torch.no_grad():
                model.norm.weight.fill_(LOGIT_STD / (EMBED_STD * math.sqrt(cfg.hidden_size)))
        return model.eval().requires_grad_(False)

    @classmethod
    def from_pretrained(cls, folder: str | Path, dtype: torch.dtype = torch.float32, device="cpu") -> "Qwen3Model":
        model = cls.create(ModelConfig.from_hf(folder), None, dtype, device)
        model.load_safetensors(folder)
        return model

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.embed_tokens.weight if self.config.tie_embeddings else self.lm_head.weight

    def allocate_kv_cache(self, num_blocks: int, block_size: int, block_table_width: int | None = None) -> PagedKVCache:
        """A fresh cache; ``block_table_width`` is the engine's blocks per sequence, if fixed."""
        w = self.embed_tokens.weight
        kv_heads = self.layers[0].self_attn.num_kv_heads  # all, or a tensor-parallel rank's share
        self.kv_cache = PagedKVCache(
            self.config.num_layers, num_blocks, block_size, kv_heads, self.config.head_dim, w.dtype, w.device
        )
        self.block_table_width = block_table_width
        return self.kv_cache

    def speculative_verify_capabilities(self):
        """The fixed-shape forward reads only persistent metadata, so inputs may be updated in
        the captured graph; full attention, no linear state; the layout of the allocated cache."""
        from ..runtime.capabilities import SpeculativeVerifyCapabilities

        if self.kv_cache is None or getattr(self, "block_table_width", None) is None:
            return SpeculativeVerifyCapabilities()  # no fixed cache layout yet: nothing to capture over
        return SpeculativeVerifyCapabilities(
            requires_causal_chunked_prefill=False,
            supports_in_graph_input_update=True,
            has_linear_state=False,
            block_size=self.kv_cache.block_size,
            block_table_width=self.block_table_width,
        )

    def forward(
        self,
        tokens,
        positions,
        slot_mapping,
        block_table,
        kv_lens,
        query_start_loc,
        rows_per_seq: int,
        taps: tuple[int, ...] = (),
        logit_rows: slice | torch.Tensor | None = None,
        on_taps=None,
        logits_out: torch.Tensor | None = None,
        logit_tiles_out: torch.Tensor | None = None,
    ):
        """``tokens[N] -> (hidden[N, H], logits[N, V])``; writes K/V at ``slot_mapping``.

        With ``taps`` (layer indices) a third output holds those layers' outputs
        concatenated, ``[N, len(taps) * H]``: a block draft's context; ``on_taps``
        is called with that tensor as soon as the last tapped layer has run, before
        the later layers and the LM head are issued (work that reads only the taps
        can start beside them).  With ``logit_rows`` (a slice or row indices) the
        LM head runs over those rows alone (a prefill needs its last rows', or
        none): ``logits[len(rows), V]``.  ``logits_out`` (``[rows, V]``, e.g. a
        vocabulary pass's float32 buffer) receives the logits and is the second
        output (``cuda_forward.lm_head``).
        """
        batch = attention_batch(
            self.forward_kernels,
            positions,
            slot_mapping,
            block_table,
            kv_lens,
            query_start_loc,
            rows_per_seq,
            self.config.head_dim,
            self.config.rope_theta,
        )
        x = self.embed_tokens(tokens.long())
        tapped, cat = [], None
        wanted = sum(i in taps for i in range(len(self.layers)))

        def tap(value: torch.Tensor) -> None:
            nonlocal cat
            tapped.append(value)
            if len(tapped) == wanted:
                cat = torch.cat(tapped, dim=-1)
                if on_taps is not None:
                    on_taps(cat)

        if isinstance(batch, FastBatch):
            delta = None  # each layer's MLP output, added in the next layer's first kernel
            for i, layer in enumerate(self.layers):
                x, delta = cuda_forward.layer(layer, x, delta, batch, self.kv_cache, i)
                if i in taps:
                    tap(cuda_forward.materialize(x, delta))
            x, h = cuda_forward.add_rms_norm(x, delta, self.norm)  # the last residual add and the final norm
            out = (
                x,
                self.project(
                    h if logit_rows is None else h[logit_rows], fast=True, out=logits_out, tiles=logit_tiles_out
                ),
            )
        else:
            for i, layer in enumerate(self.layers):
                x = layer(x, batch, self.kv_cache, i)
                if i in taps:
                    tap(x)
            out = x, self.logits(x if logit_rows is None else x[logit_rows], out=logits_out, tiles=logit_tiles_out)
        if taps and cat is None:  # no tap index below the layer count: as torch.cat of nothing, an error
            cat = torch.cat(tapped, dim=-1)
        return (*out, cat) if taps else out

    def logits(
        self, x: torch.Tensor, out: torch.Tensor | None = None, tiles: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The LM head over the final norm (a tensor-parallel rank: its vocabulary range), into ``out`` if given."""
        return self.project(self.norm(x), out=out, tiles=tiles)

    def project(
        self, h: torch.Tensor, fast: bool = False, out: torch.Tensor | None = None, tiles: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The LM head alone, on the final norm's output ``h``; ``fast``: the Triton forward's
        (``cuda_forward.lm_head``), else cuBLAS; into ``out`` if given."""
        return cuda_forward.lm_head(h, self.lm_head_weight, fast, out, tiles)

    @property
    def argmax_kernels(self) -> str:
        """The kernels of the argmax over this model's logits (``cuda_forward.argmax``): its forward's; the drafts'
        argmax over whole logits takes them too."""
        return self.forward_kernels

    def greedy_tokens(self, logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Greedy tokens from ``forward``'s logits: the argmax over the whole vocabulary, lowest index
        on ties.  Decode loops call this rather than ``argmax``, so a sharded LM head works too.  ``out``
        (one integer per row, any integer dtype) takes the tokens and is returned; ``argmax_kernels`` picks
        the argmax's kernels (``cuda_forward.argmax``)."""
        return cuda_forward.argmax(logits, self.argmax_kernels, out)

    def load_hf_state_dict(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Copy Hugging Face Qwen3 tensors (``model.layers.N.self_attn.q_proj.weight``, ... with or
        without the ``model.`` prefix); a tied model skips ``lm_head.weight``.  A tensor with no place
        in the model, a missing one, or one of another shape is an error naming it."""
        own = dict(self.named_parameters())
        seen, unknown = set(), []
        with torch.no_grad():
            for key, value in tensors.items():
                name = param_name(key)
                if name == "lm_head.weight" and self.config.tie_embeddings:
                    continue
                if name not in own:
                    unknown.append(key)
                    continue
                if own[name].shape != value.shape:
                    raise ValueError(f"{key}: shape {tuple(value.shape)}, the model's is {tuple(own[name].shape)}")
                own[name].copy_(value)
                seen.add(name)
        if unknown:
            raise KeyError(f"{len(unknown)} checkpoint tensors have no place in the model, e.g. {unknown[:4]}")
        missing = sorted(set(own) - seen)
        if missing:
            raise KeyError(f"checkpoint lacks {len(missing)} tensors, e.g. {missing[:4]}")

    def load_safetensors(self, folder: str | Path) -> None:
        """Every ``*.safetensors`` file of ``folder`` (a sharded checkpoint too)."""
        self.load_hf_state_dict(load_folder(folder))
