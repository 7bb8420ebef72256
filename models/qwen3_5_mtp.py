"""The MTP head of a Qwen3.5-style hybrid target: the checkpoint's ``mtp.*`` module.

A Qwen3.5 checkpoint carries one extra decoder layer of the full-attention
kind (gated attention, q/k norms, partial RoPE, zero-centred RMSNorms) that
predicts the token after next::

    e = pre_fc_norm_embedding(embed(t_p))
    x = fc(cat(e, pre_fc_norm_hidden(hidden_{p-1})))     # fc: [H, 2H], embedding first
    h = norm(layers.0(x))                                # own paged KV cache, the target's slots
    logits = lm_head(h)                                  # embedding and LM head are the target's

``hidden_{p-1}`` is the target's hidden state after its final norm (what the
module was trained on), and a chained step reads the head's own ``h``: the
head's ``from_target`` turns the target's pre-norm hidden state into it.  The
engine's rows sit one position after the checkpoint's convention (row ``p``
reads ``t_p``); RoPE is relative, so the attention scores are the same, and
since no row ever sits at position 0 the head attends to positions from 1 on
(``AttentionBatch.kv_start``), as if its cache began there.  The
parameters are named as the checkpoint names them without ``mtp.``, so
``load_mtp_tensors`` copies them by name; without a checkpoint the weights are
seeded random ones, as ``MTPHead``'s are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from . import cuda_forward, qwen3_5_fast
from .draft_vocab import head_weight
from .errors import EngineError
from .mtp_head import MTPHead
from .paged_kv import AttentionBatch, PagedKVCache
from .qwen3 import EMBED_STD, LOGIT_STD, build_on
from .qwen3_5 import DecoderLayer, HybridBatch, Qwen35Model, ZeroCenteredRMSNorm
from .qwen3_5_config import FULL

__all__ = ["Qwen35MTPHead"]

PREFIX = "mtp."


class Qwen35MTPHead(MTPHead):
    """The Qwen3.5 MTP module over a ``Qwen35Model``; the engine drives it as it drives ``MTPHead``."""

    def __init__(self, target: Qwen35Model):
        nn.Module.__init__(self)  # MTPHead's own layers are the dense Qwen3 ones; this head has its own
        cfg = target.config
        self.config = cfg
        self.pre_fc_norm_embedding = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.pre_fc_norm_hidden = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.fc = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(cfg, FULL, 0)])
        self.norm = ZeroCenteredRMSNorm(cfg.hidden_size, cfg.rms_eps)
        self._target = (target,)  # shared, not a submodule: its weights stay the target's
        self.kv_cache: PagedKVCache | None = None
        self.from_checkpoint = False  # whether the weights are the checkpoint's mtp.* tensors

    @property
    def layer(self) -> DecoderLayer:
        return self.layers[0]

    @classmethod
    def create(cls, target: Qwen35Model, seed: int | None = 1) -> "Qwen35MTPHead":
        """Seeded random weights (zero-centred norms at gain one; ``seed=None`` leaves them unset)."""
        w = target.embed_tokens.weight
        head = build_on(lambda: cls(target), w.dtype, w.device)
        if seed is not None:
            head.init_random_weights(seed)
        return head.eval().requires_grad_(False)

    def init_random_weights(self, seed: int) -> None:
        """Seeded weights drawn on the CPU: the (zero-centred) norms at gain one, projections at unit gain,
        and the final norm's gain giving the logit spread of the random targets (``qwen3.LOGIT_STD``)."""
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(
                    torch.zeros(p.shape) if p.dim() == 1 else torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5
                )
            self.norm.weight.fill_(LOGIT_STD / (EMBED_STD * math.sqrt(self.config.hidden_size)) - 1.0)

    @classmethod
    def from_checkpoint_tensors(cls, target: Qwen35Model, tensors: Mapping[str, torch.Tensor]) -> "Qwen35MTPHead":
        """The head with the checkpoint's ``mtp.*`` tensors (``target.mtp_tensors``)."""
        head = cls.create(target, seed=None)
        head.load_mtp_tensors(tensors)
        return head

    def load_mtp_tensors(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Copy ``mtp.<name>`` into parameter ``<name>``; an unknown, missing or misshapen tensor is an
        ``EngineError`` naming it."""
        own = dict(self.named_parameters())
        unknown = [k for k in tensors if k.removeprefix(PREFIX) not in own]
        if unknown:
            raise EngineError(
                f"checkpoint tensor '{unknown[0]}' has no place in the Qwen3.5 MTP head "
                f"({len(unknown)} such mtp.* tensor(s))"
            )
        missing = [PREFIX + n for n in own if PREFIX + n not in tensors]
        if missing:
            raise EngineError(
                f"the checkpoint's MTP module lacks '{missing[0]}' ({len(missing)} missing mtp.* tensor(s))"
            )
        with torch.no_grad():
            for name, p in own.items():
                value = tensors[PREFIX + name]
                if value.shape != p.shape:
                    raise EngineError(
                        f"checkpoint tensor '{PREFIX + name}': shape {tuple(value.shape)}, the MTP head's is "
                        f"{tuple(p.shape)}"
                    )
                p.copy_(value)
        self.from_checkpoint = True

    def allocate_kv_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        w, attn = self.fc.weight, self.layer.self_attn
        self.kv_cache = PagedKVCache(1, num_blocks, block_size, attn.num_kv_heads, attn.head_dim, w.dtype, w.device)
        return self.kv_cache

    def _fast(self) -> bool:
        """Whether the head runs the target's Triton path (``Qwen35Model.hybrid_kernels``) on this device."""
        w = self.fc.weight
        return cuda_forward.use_triton(self._target[0].hybrid_kernels, w.device)

    def from_target(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's pre-norm hidden state as this head reads it: after the target's final norm."""
        norm = self._target[0].norm
        if self._fast():
            return qwen3_5_fast.final_norm(norm, hidden.contiguous(), None)[1]
        return norm(hidden)

    def forward(
        self,
        tokens,
        positions,
        slot_mapping,
        hidden_in,
        block_table,
        kv_lens,
        query_start_loc,
        rows_per_seq: int,
        logit_rows: slice | torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``tokens[N], hidden_in[N, H] -> (h[N, H], logits[N, V])``; ``h`` is what a chained step reads.
        With ``logit_rows`` the LM head runs over those rows alone (as ``MTPHead.forward``)."""
        target, cfg = self._target[0], self.config
        if self._fast():
            h = self._forward_fast(
                tokens, positions, slot_mapping, hidden_in, block_table, kv_lens, query_start_loc, rows_per_seq
            )
            return h, cuda_forward.lm_head(h if logit_rows is None else h[logit_rows], head_weight(self, target))
        attention = AttentionBatch.build(
            positions, slot_mapping, block_table, kv_lens, query_start_loc, rows_per_seq, cfg.rotary_dim, cfg.rope_theta
        )
        attention.kv_start = 1  # position 0 holds no row of the head (see the module docstring)
        batch = HybridBatch(attention, self.kv_cache, None, None, None)  # full attention: no linear state
        e = self.pre_fc_norm_embedding(target.embed_tokens(tokens.long()))
        x = self.fc(torch.cat([e, self.pre_fc_norm_hidden(hidden_in.to(e.dtype))], dim=-1))
        h = self.norm(self.layer(x, batch))
        return h, F.linear(h if logit_rows is None else h[logit_rows], head_weight(self, target))

    def _forward_fast(
        self, tokens, positions, slot_mapping, hidden_in, block_table, kv_lens, query_start_loc, rows_per_seq: int
    ) -> torch.Tensor:
        """``forward``'s ``h`` on the target's Triton path: the two input norms and the final one ``add_rms_norm``
        launches, the layer ``qwen3_5_fast``'s (paged attention from position 1); ``forward`` adds the LM head."""
        target, cfg = self._target[0], self.config
        fast = qwen3_5_fast.fast_batch(
            target.hybrid_kernels,
            positions,
            slot_mapping,
            block_table,
            kv_lens,
            query_start_loc,
            rows_per_seq,
            cfg,
            kv_start=1,
            row_index=False,
        )
        e = qwen3_5_fast.final_norm(self.pre_fc_norm_embedding, target.embed_tokens(tokens.long()), None)[1]
        hn = qwen3_5_fast.final_norm(self.pre_fc_norm_hidden, hidden_in.to(e.dtype).contiguous(), None)[1]
        both = torch.cat([e, hn], dim=-1)
        x = cuda_forward.linear(both, self.fc.weight) if type(self.fc) is nn.Linear else self.fc(both)
        batch = HybridBatch(None, self.kv_cache, None, None, None, fast)
        x, delta = qwen3_5_fast.layer_carry(self.layer, x, None, batch)
        return qwen3_5_fast.final_norm(self.norm, x, delta)[1]
