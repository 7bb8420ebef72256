"""A Qwen3.5-style hybrid target: Gated DeltaNet layers, with every fourth layer gated full attention.

The forward is ``Qwen3Model``'s (fixed shapes, ``rows_per_seq`` rows per
sequence, a paged KV cache for the full-attention layers) plus the linear
state's slots, keyword-only because a hybrid cannot run without them::

    model = Qwen35Model.create("qwen3.5-tiny", seed=0)
    model.allocate_kv_cache(num_blocks=64, block_size=16)
    model.allocate_linear_state(num_slots=32)
    hidden, logits = model(tokens, positions, slot_mapping, block_table, kv_lens,
                           query_start_loc, rows_per_seq=W,
                           state_read=read, state_write=write)

``state_read[B]`` names the slot each sequence's linear state starts from
(-1: the zero state of a prompt's start) and ``state_write[N]`` the slot the
state after each row goes to (-1: none); ``gated_deltanet`` gives the whole
contract.  Prefill: read -1, write at the last prompt row.  Verification of W
rows: read the committed slot, write row j's state to slot j; the next step
reads the accepted row's slot.

The torch forward here is the exact reference (float32 on the CPU); the
weights and names are transformers' (``model.layers.N.linear_attn.in_proj_qkv``
and so on), so a checkpoint loads by name and the two can be compared.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import cuda_forward, qwen3_5_fast
from .checkpoint import load_folder
from .cuda_forward import FastBatch, materialize
from .gated_deltanet import GatedDeltaNet, LinearStatePool
from .paged_kv import AttentionBatch, PagedKVCache
from .qwen3 import EMBED_STD, LOGIT_STD, MLP, ModelConfig, build_on, partial_rope
from .qwen3_5_config import FULL, LINEAR, PRESETS, Qwen35Config, hf_param_name

__all__ = ["PRESETS", "Qwen35Config", "Qwen35Model"]


class ZeroCenteredRMSNorm(nn.Module):
    """Qwen3.5's RMSNorm: the gain is ``1 + weight``, so the weight starts (and is stored) at zero."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:  # one fused kernel, the same float32 arithmetic
            return qwen3_5_fast.rms_norm(self, x)
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).type_as(x)


class GatedAttention(nn.Module):
    """Full attention whose ``q_proj`` also yields, per head, a gate on the output (``sigmoid(gate)``)."""

    def __init__(self, cfg: Qwen35Config):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d * 2, bias=False)  # per head: [query | gate]
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(d, cfg.rms_eps)
        self.k_norm = ZeroCenteredRMSNorm(d, cfg.rms_eps)

    def forward(self, x, batch: AttentionBatch, cache: PagedKVCache, layer: int):
        n = x.shape[0]
        q, gate = self.q_proj(x).view(n, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        q = partial_rope(self.q_norm(q), batch.cos, batch.sin)
        k = partial_rope(self.k_norm(self.k_proj(x).view(n, self.num_kv_heads, self.head_dim)), batch.cos, batch.sin)
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        out = batch.attend(cache, layer, q, k, v).reshape(n, -1)
        return self.o_proj(out * torch.sigmoid(gate.reshape(n, -1)))


@dataclass(slots=True)
class HybridBatch:
    """One forward's metadata and state for every layer: attention's, and the linear state's slots."""

    attention: AttentionBatch | None  # the torch path's (None on the Triton path, which reads ``fast``)
    kv_cache: PagedKVCache | None
    pool: LinearStatePool | None
    state_read: torch.Tensor  # [B] slot each sequence starts from, -1: zeros
    state_write: torch.Tensor  # [N] slot the state after each row goes to, -1: none
    fast: FastBatch | None = None  # set: the CUDA forward of ``qwen3_5_fast``


class DecoderLayer(nn.Module):
    """Pre-norm residual block; the token mixer is ``linear_attn`` or ``self_attn`` by the layer's type.

    ``index`` is the layer's place among the layers of its type: its layer in
    the KV cache (full attention) or in the linear state pool.
    """

    def __init__(self, cfg: Qwen35Config, kind: str, index: int):
        super().__init__()
        self.kind, self.index = kind, index
        self.input_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_eps)
        if kind == LINEAR:
            self.linear_attn = GatedDeltaNet(cfg)
        else:
            self.self_attn = GatedAttention(cfg)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, batch: HybridBatch) -> torch.Tensor:
        if batch.fast is not None:
            return qwen3_5_fast.layer(self, x, batch)
        h = self.input_layernorm(x)
        if self.kind == LINEAR:
            rows = batch.attention.row_index
            h = self.linear_attn.forward_torch(h, rows, batch.state_read, batch.state_write, batch.pool, self.index)
        else:
            h = self.self_attn(h, batch.attention, batch.kv_cache, self.index)
        x = x + h
        return x + self.mlp(self.post_attention_layernorm(x))


def init_random_weights(model: "Qwen35Model", seed: int) -> None:
    """Seeded weights drawn on the CPU, so every device and dtype sees the same model.

    Norm gains start at one, projections at unit gain; the decays follow
    transformers' initialisation (``A`` uniform in [0.01, 16], ``dt_bias`` one),
    so some heads forget within a token and some carry state far.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.norm.weight") or name.endswith("dt_bias"):
                w = torch.ones(p.shape)
            elif name.endswith("norm.weight"):
                w = torch.zeros(p.shape)  # zero-centred: gain one
            elif name.endswith("A_log"):
                w = (torch.rand(p.shape, generator=gen) * (16 - 0.01) + 0.01).log()
            elif "embed" in name:
                w = torch.randn(p.shape, generator=gen) * EMBED_STD
            elif name.endswith("conv1d.weight"):
                w = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1])
            else:
                w = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1])
            p.copy_(w)
        # the logit spread of qwen3.py's random models (see its EMBED_STD note)
        model.norm.weight.fill_(LOGIT_STD / (EMBED_STD * math.sqrt(model.config.hidden_size)) - 1.0)


class Qwen35Model(nn.Module):
    """The hybrid decoder; ``forward`` returns the pre-norm hidden state and logits (see the module docstring)."""

    # the drafts' dense layers (MTP head, DFlash / DSpark) run the plain torch attention over this target
    forward_kernels = "torch"
    # the target's own forward: "auto" (Triton kernels on CUDA, qwen3_5_fast), "torch" or "triton"
    hybrid_kernels = "auto"

    def __init__(self, config: Qwen35Config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        kinds = config.layer_types
        self.layers = nn.ModuleList(DecoderLayer(config, t, kinds[:i].count(t)) for i, t in enumerate(kinds))
        self.norm = ZeroCenteredRMSNorm(config.hidden_size, config.rms_eps)
        if not config.tie_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.kv_cache: PagedKVCache | None = None
        self.linear_state: LinearStatePool | None = None
        self.block_table_width: int | None = None
        # a checkpoint's MTP module (``mtp.*``, by its names), kept for the MTP draft to load (qwen3_5_mtp.py)
        self.mtp_tensors: dict[str, torch.Tensor] = {}

    @classmethod
    def create(
        cls, config: Qwen35Config | str, seed: int | None = 0, dtype: torch.dtype = torch.float32, device="cpu"
    ) -> "Qwen35Model":
        """Random-weight model (``seed=None`` leaves weights unset, for loading)."""
        cfg = Qwen35Config.preset(config) if isinstance(config, str) else config
        model = build_on(lambda: cls(cfg), dtype, device)
        if seed is not None and str(device) != "meta":
            init_random_weights(model, seed)
        return model.eval().requires_grad_(False)

    @classmethod
    def from_hf_state_dict(
        cls, config: Mapping, tensors: Mapping[str, torch.Tensor], dtype: torch.dtype = torch.float32, device="cpu"
    ) -> "Qwen35Model":
        """A model from a Hugging Face config dict and its tensors (names with or without the
        ``model.language_model.`` prefix); an unknown config field or tensor is an error naming it."""
        model = cls.create(Qwen35Config.from_hf_dict(config), None, dtype, device)
        model.load_hf_state_dict(tensors)
        return model

    @classmethod
    def from_pretrained(cls, folder: str | Path, dtype: torch.dtype = torch.float32, device="cpu") -> "Qwen35Model":
        """A local Hugging Face folder: ``config.json`` and ``*.safetensors``."""
        config = json.loads((Path(folder) / "config.json").read_text())
        config.setdefault("_name_or_path", Path(folder).name)
        return cls.from_hf_state_dict(config, load_folder(folder), dtype, device)

    def load_hf_state_dict(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Copy transformers' tensors by name; ``mtp.*`` are kept in ``mtp_tensors`` for the MTP draft and
        the vision tower's are left out."""
        own = dict(self.named_parameters())
        seen, unknown = set(), []
        self.mtp_tensors = {key: value for key, value in tensors.items() if key.startswith("mtp.")}
        with torch.no_grad():
            for key, value in tensors.items():
                name = hf_param_name(key)
                if name is None or (name == "lm_head.weight" and self.config.tie_embeddings):
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

    @property
    def draft_config(self) -> ModelConfig:
        """The dense (Qwen3-style) shape a draft's layers take over this target: its attention heads, FFN,
        vocabulary and norms; the drafts share its embedding and LM head."""
        c = self.config
        return ModelConfig(
            f"{c.name}-draft",
            1,
            c.hidden_size,
            c.num_heads,
            c.num_kv_heads,
            c.head_dim,
            c.intermediate_size,
            c.vocab_size,
            c.rms_eps,
            c.rope_theta,
            c.tie_embeddings,
        )

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.embed_tokens.weight if self.config.tie_embeddings else self.lm_head.weight

    def allocate_kv_cache(self, num_blocks: int, block_size: int, block_table_width: int | None = None) -> PagedKVCache:
        """A fresh cache for the full-attention layers; ``block_table_width``: the engine's, if fixed."""
        w, cfg = self.embed_tokens.weight, self.config
        layers = max(len(cfg.layers_of(FULL)), 1)  # a cache of one unused layer keeps the metadata uniform
        kv_heads = self._mixer(FULL, "self_attn").num_kv_heads if cfg.layers_of(FULL) else cfg.num_kv_heads
        self.kv_cache = PagedKVCache(layers, num_blocks, block_size, kv_heads, cfg.head_dim, w.dtype, w.device)
        self.block_table_width = block_table_width
        return self.kv_cache

    def allocate_linear_state(self, num_slots: int) -> LinearStatePool:
        """A fresh (zero) state pool of ``num_slots`` slots in every linear layer."""
        w, cfg = self.embed_tokens.weight, self.config
        heads, conv_dim = cfg.linear_num_value_heads, cfg.conv_dim
        if cfg.layers_of(LINEAR):
            mixer = self._mixer(LINEAR, "linear_attn")
            heads, conv_dim = mixer.value_heads, mixer.conv_dim
        self.linear_state = LinearStatePool(
            max(len(cfg.layers_of(LINEAR)), 1),
            num_slots,
            heads,
            cfg.linear_key_head_dim,
            cfg.linear_value_head_dim,
            conv_dim,
            cfg.linear_conv_kernel_dim,
            w.dtype,
            w.device,
        )
        return self.linear_state

    def _mixer(self, kind: str, name: str) -> nn.Module:
        """The first ``kind`` layer's token mixer: its head counts are all of them, or a tensor-parallel
        rank's share (``models/tp.py``), which is what the cache and the pool hold."""
        return getattr(self.layers[self.config.layers_of(kind)[0]], name)

    def speculative_verify_capabilities(self):
        """Fixed-shape metadata as ``Qwen3Model``'s, plus a linear state."""
        from ..runtime.capabilities import SpeculativeVerifyCapabilities

        if self.kv_cache is None or self.block_table_width is None:
            return SpeculativeVerifyCapabilities()
        return SpeculativeVerifyCapabilities(
            requires_causal_chunked_prefill=False,
            supports_in_graph_input_update=True,
            has_linear_state=True,
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
        *,
        state_read: torch.Tensor,
        state_write: torch.Tensor,
        logits_out: torch.Tensor | None = None,
        logit_tiles_out: torch.Tensor | None = None,
    ):
        """``tokens[N] -> (hidden[N, H], logits[N, V])``; writes K/V at ``slot_mapping`` and linear
        states at ``state_write``.  With ``taps`` a third output holds those layers' outputs
        concatenated, ``[N, len(taps) * H]``; with ``logit_rows`` the LM head runs over those rows alone,
        into ``logits_out`` when given (as ``Qwen3Model.forward``)."""
        cfg = self.config
        fast = qwen3_5_fast.fast_batch(
            self.hybrid_kernels, positions, slot_mapping, block_table, kv_lens, query_start_loc, rows_per_seq, cfg
        )
        if fast is not None:
            return self._forward_fast(
                tokens,
                taps,
                HybridBatch(None, self.kv_cache, self.linear_state, state_read, state_write, fast),
                logit_rows,
                logits_out,
                logit_tiles_out,
            )
        attention = AttentionBatch.build(
            positions, slot_mapping, block_table, kv_lens, query_start_loc, rows_per_seq, cfg.rotary_dim, cfg.rope_theta
        )
        batch = HybridBatch(attention, self.kv_cache, self.linear_state, state_read, state_write)
        x = self.embed_tokens(tokens.long())
        tapped = []
        for i, layer in enumerate(self.layers):
            x = layer(x, batch)
            if i in taps:
                tapped.append(x)
        out = x, self.logits(x if logit_rows is None else x[logit_rows], out=logits_out, tiles=logit_tiles_out)
        return (*out, torch.cat(tapped, dim=-1)) if taps else out

    def _forward_fast(
        self,
        tokens,
        taps: tuple[int, ...],
        batch: HybridBatch,
        logit_rows: slice | torch.Tensor | None = None,
        logits_out: torch.Tensor | None = None,
        logit_tiles_out: torch.Tensor | None = None,
    ):
        """``forward`` on the Triton path: each layer's MLP output carried into the next layer's first norm
        launch (materialised only at a tapped layer), the last one into the final norm's."""
        x, delta = self.embed_tokens(tokens.long()), None
        tapped = []
        for i, layer in enumerate(self.layers):
            x, delta = qwen3_5_fast.layer_carry(layer, x, delta, batch)
            if i in taps:
                x, delta = materialize(x, delta), None
                tapped.append(x)
        x, h = qwen3_5_fast.final_norm(self.norm, x, delta)
        out = (
            x,
            self.project(h if logit_rows is None else h[logit_rows], fast=True, out=logits_out, tiles=logit_tiles_out),
        )
        return (*out, torch.cat(tapped, dim=-1)) if taps else out

    def logits(
        self, x: torch.Tensor, out: torch.Tensor | None = None, tiles: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.project(self.norm(x), out=out, tiles=tiles)

    def project(
        self, h: torch.Tensor, fast: bool = False, out: torch.Tensor | None = None, tiles: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The LM head alone, on the final norm's output ``h``; ``fast``: the Triton forward's
        (``cuda_forward.lm_head``), else cuBLAS; into ``out`` if given."""
        return cuda_forward.lm_head(h, self.lm_head_weight, fast, out, tiles)

    @property
    def argmax_kernels(self) -> str:
        """The kernels of the argmax over the logits (as ``Qwen3Model``'s): the target forward's
        (``hybrid_kernels``), not the dense drafts' attention (``forward_kernels``)."""
        return self.hybrid_kernels

    def greedy_tokens(self, logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The argmax over the vocabulary, lowest index on ties, into ``out`` when given (as ``Qwen3Model``)."""
        return cuda_forward.argmax(logits, self.argmax_kernels, out)
