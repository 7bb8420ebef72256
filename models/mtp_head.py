"""The draft model: a multi-token-prediction head over the target's hidden states.

``MTPHead`` is a learned-style head (random weights by default, so its
acceptance is low).  Drafts with a chosen acceptance rate come from
``acceptance.AcceptanceMix`` instead.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from . import cuda_forward
from .cuda_forward import FastBatch
from .draft_vocab import head_weight
from .paged_kv import PagedKVCache
from .qwen3 import (
    EMBED_STD,
    LOGIT_STD,
    DecoderLayer,
    Qwen3Model,
    RMSNorm,
    attention_batch,
    build_on,
    draft_config,
    init_random_weights,
)


class MTPHead(nn.Module):
    """One decoder layer over the target's hidden state and the next token.

    The row at position ``p`` reads token ``t_p`` and the target's hidden
    state of position ``p - 1`` and predicts token ``p + 1``::

        x = eh_proj(cat(enorm(embed(t_p)), hnorm(hidden_{p-1})))
        x = layer(x)                      # own paged KV cache, target's slots
        logits = lm_head(norm(x))         # embedding and head are the target's
                                          # (a draft_vocab's rows of the head alone)

    Chained drafting feeds the head's own returned hidden state back in;
    the target's reaches the head through ``from_target``.  Over a hybrid
    target the MTP draft is ``qwen3_5_mtp.Qwen35MTPHead`` instead.
    """

    from_checkpoint = False  # random weights (a checkpoint's MTP module: qwen3_5_mtp.py)
    draft_vocab = None  # a draft_vocab.DraftVocab: the logits over its ids alone (None: the whole vocabulary)

    def __init__(self, target: Qwen3Model):
        super().__init__()
        cfg = draft_config(target)
        self.config = cfg
        self.enorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.eh_proj = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.layer = DecoderLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self._target = (target,)  # shared, not a submodule: its weights stay the target's
        self.kv_cache: PagedKVCache | None = None

    @classmethod
    def create(cls, target: Qwen3Model, seed: int = 1) -> "MTPHead":
        w = target.embed_tokens.weight
        head = build_on(lambda: cls(target), w.dtype, w.device)
        init_random_weights(head, seed)
        with torch.no_grad():
            head.norm.weight.fill_(LOGIT_STD / (EMBED_STD * math.sqrt(draft_config(target).hidden_size)))
        return head.eval().requires_grad_(False)

    def from_target(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's hidden state as this head reads it: as it is."""
        return hidden

    def allocate_kv_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        w = self.eh_proj.weight
        kv_heads = self.layer.self_attn.num_kv_heads  # all, or a tensor-parallel rank's share
        self.kv_cache = PagedKVCache(1, num_blocks, block_size, kv_heads, self.config.head_dim, w.dtype, w.device)
        return self.kv_cache

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
        """``tokens[N], hidden_in[N, H] -> (hidden[N, H], logits[N, V])``; with ``logit_rows`` the LM head
        runs over those rows alone (a prefill writes the head's K/V and needs no logits: ``slice(0, 0)``)."""
        target = self._target[0]
        batch = attention_batch(
            target.forward_kernels,
            positions,
            slot_mapping,
            block_table,
            kv_lens,
            query_start_loc,
            rows_per_seq,
            self.config.head_dim,
            self.config.rope_theta,
        )
        e = self.enorm(target.embed_tokens(tokens.long()))
        eh = torch.cat([e, self.hnorm(hidden_in.to(e.dtype))], dim=-1)
        x = cuda_forward.linear(eh, self.eh_proj.weight) if isinstance(batch, FastBatch) else self.eh_proj(eh)
        if isinstance(batch, FastBatch):  # the residual add and the final norm in one kernel
            x, h = cuda_forward.add_rms_norm(
                *cuda_forward.layer(self.layer, x, None, batch, self.kv_cache, 0), self.norm
            )
            return x, cuda_forward.lm_head(h if logit_rows is None else h[logit_rows], head_weight(self, target))
        h = self.norm(x := self.layer(x, batch, self.kv_cache, 0))
        return x, F.linear(h if logit_rows is None else h[logit_rows], head_weight(self, target))
