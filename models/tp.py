"""Tensor parallelism for the reference target: a transformation applied to a built model.

Every rank builds the full model from the same seed (the weights are drawn on
the CPU, so they are identical everywhere) and keeps its share::

    full = Qwen3Model.create("tiny", seed=0, device=tp.device)
    model = shard_model(full, tp)          # TP model: same tokens as ``full``
    head = MTPHead.create(model, seed=1)   # the draft body stays whole (TP1) on every rank

Per decoder layer, rank ``r`` of ``n`` holds

* column shares of ``q_proj`` (its query heads), ``k_proj`` / ``v_proj`` (its
  KV heads: the paged KV cache holds only those) and ``gate_proj`` / ``up_proj``;
* the matching row shares of ``o_proj`` and ``down_proj``, whose partial sums
  are added up by an all-reduce (``RowParallelLinear``);

and the LM head is vocabulary-parallel: each rank computes the logits of its
vocabulary range, and ``greedy_tokens`` takes the argmax over the whole
vocabulary from an all-gather of every rank's (max, argmax) pair, breaking
ties towards the lower index exactly like ``torch.argmax`` on one device.
The input embedding stays whole (a lookup needs no communication), and so
does the tied head weight the TP1 draft body reads.

In exact arithmetic the TP model computes what the full model does; in
floating point the row-parallel sums are added in a different order, so a
near-tie between two logits can in principle resolve differently (the tests
run float32, where this does not happen on their inputs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..parallel.group import TensorParallel, TPError
from .mtp_head import MTPHead
from .qwen3 import MLP, Attention, DecoderLayer, ModelConfig, Qwen3Model

__all__ = [
    "ColumnParallelLinear",
    "RowParallelLinear",
    "TensorParallelQwen3",
    "shard_head",
    "shard_layer",
    "shard_model",
    "shard_problem",
]

EXACT_FLOAT_INDEX = 1 << 24  # vocabulary indices ride along as float32 in the argmax all-gather


class ColumnParallelLinear(nn.Module):
    """``x @ W[lo:hi].T``: this rank's output features; no communication."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class RowParallelLinear(nn.Module):
    """``sum over ranks of x_r @ W[:, lo:hi].T``: this rank's input features, then an all-reduce."""

    def __init__(self, weight: torch.Tensor, tp: TensorParallel):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().contiguous().clone(), requires_grad=False)
        self.tp = tp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tp.all_reduce_(F.linear(x, self.weight))


def _rows(linear: nn.Linear, lo: int, hi: int) -> ColumnParallelLinear:
    return ColumnParallelLinear(linear.weight[lo:hi])


def shard_attention(attn: Attention, tp: TensorParallel) -> None:
    """Keep this rank's query heads and the KV heads they read (GQA groups stay whole)."""
    d = attn.head_dim
    q_lo, q_hi = tp.span(attn.num_heads, "query heads")
    kv_lo, kv_hi = tp.span(attn.num_kv_heads, "KV heads")
    attn.q_proj = _rows(attn.q_proj, q_lo * d, q_hi * d)
    attn.k_proj = _rows(attn.k_proj, kv_lo * d, kv_hi * d)
    attn.v_proj = _rows(attn.v_proj, kv_lo * d, kv_hi * d)
    attn.o_proj = RowParallelLinear(attn.o_proj.weight[:, q_lo * d : q_hi * d], tp)
    attn.num_heads, attn.num_kv_heads = q_hi - q_lo, kv_hi - kv_lo


def shard_mlp(mlp: MLP, tp: TensorParallel) -> None:
    lo, hi = tp.span(mlp.gate_proj.weight.shape[0], "intermediate size")
    mlp.gate_proj, mlp.up_proj = _rows(mlp.gate_proj, lo, hi), _rows(mlp.up_proj, lo, hi)
    mlp.down_proj = RowParallelLinear(mlp.down_proj.weight[:, lo:hi], tp)


def shard_layer(layer: DecoderLayer, tp: TensorParallel) -> DecoderLayer:
    """``layer`` turned, in place, into this rank's share (norms stay whole)."""
    if tp.distributed:
        shard_attention(layer.self_attn, tp)
        shard_mlp(layer.mlp, tp)
    return layer


class TensorParallelQwen3(Qwen3Model):
    """This rank's share of a ``Qwen3Model``; ``logits`` returns the rank's vocabulary range only.

    Callers take tokens with ``greedy_tokens(logits)``, never ``logits.argmax``.
    """

    def __init__(self, full: Qwen3Model, tp: TensorParallel):
        nn.Module.__init__(self)
        self.config, self.tp = full.config, tp
        self.embed_tokens, self.norm = full.embed_tokens, full.norm
        if not full.config.tie_embeddings:
            self.lm_head = full.lm_head
        self.layers = full.layers
        for layer in self.layers:
            shard_layer(layer, tp)
        self.vocab_lo, self.vocab_hi = tp.span(full.config.vocab_size, "vocabulary size")
        if full.config.vocab_size > EXACT_FLOAT_INDEX:
            raise TPError(f"vocabulary of {full.config.vocab_size} exceeds {EXACT_FLOAT_INDEX}")
        self.kv_cache = None

    def project(self, h: torch.Tensor) -> torch.Tensor:
        """``[N, V / tp]``: the logits of this rank's vocabulary range (a row slice of the head, no copy)."""
        return F.linear(h, self.lm_head_weight[self.vocab_lo : self.vocab_hi])

    def greedy_tokens(self, logits: torch.Tensor) -> torch.Tensor:
        """The argmax over the whole vocabulary from every rank's share; the lowest index wins a tie.

        Each rank's local argmax is its lowest maximal index; the ranks' ranges
        are ascending, so among equal maxima the lowest rank holds the lowest
        index, and ``argmax`` over the gathered maxima picks it.
        """
        idx = logits.argmax(-1)
        best = logits.gather(-1, idx[..., None]).squeeze(-1).float()
        pairs = self.tp.all_gather(torch.stack([best, (idx + self.vocab_lo).float()], -1))  # [tp, ..., 2]
        winner = pairs[..., 0].argmax(0, keepdim=True)
        return pairs[..., 1].gather(0, winner).squeeze(0).long()


def shard_problem(config: ModelConfig, size: int) -> str | None:
    """Why ``config`` cannot be split over ``size`` ranks (the first share that does not divide evenly), or None.

    The same shares ``shard_model`` takes, checked before any rank is started.
    """
    for what, n in (
        ("query heads", config.num_heads),
        ("KV heads", config.num_kv_heads),
        ("intermediate size", config.intermediate_size),
        ("vocabulary size", config.vocab_size),
    ):
        if n % size:
            return f"{what} ({n}) does not divide evenly over {size} ranks"
    if config.vocab_size > EXACT_FLOAT_INDEX:
        return f"vocabulary of {config.vocab_size} exceeds {EXACT_FLOAT_INDEX}"
    return None


def shard_model(model: Qwen3Model, tp: TensorParallel) -> Qwen3Model:
    """``model`` itself on one rank; else this rank's ``TensorParallelQwen3`` (it shares, and shards,
    ``model``'s layers in place, so ``model`` is not to be used afterwards)."""
    return TensorParallelQwen3(model, tp) if tp.distributed else model


def shard_head(head: MTPHead, tp: TensorParallel) -> MTPHead:
    """The draft body's decoder layer split like the target's (draft TP = target TP); its LM head
    stays whole, so its logits, and its tokens, are the same on every rank without a gather."""
    shard_layer(head.layer, tp)
    return head
