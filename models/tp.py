"""Tensor parallelism for the reference targets: a transformation applied to a built model.

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
Sampled verification needs every logit of a row: ``whole_logits`` gathers
the ranks' ranges into the whole rows on every rank (the same bits
everywhere, so every rank draws the same tokens).
The input embedding stays whole (a lookup needs no communication), and so
does the tied head weight the TP1 draft body reads.

The hybrid target (``Qwen35Model``) is split the same way, layer by layer:

* gated full attention by query / KV heads, ``q_proj``'s ``[query | gate]``
  rows of a head staying together, ``o_proj`` row-parallel;
* each Gated DeltaNet layer by heads: rank ``r`` keeps its linear key heads
  and the ``value_heads / key_heads`` consecutive value heads of each, the
  matching conv channels (``[q | k | v]``, so three row ranges of
  ``in_proj_qkv`` and ``conv1d``), the rows of ``in_proj_z`` / ``in_proj_b``
  / ``in_proj_a``, and the slices of ``dt_bias`` / ``A_log``; the gated norm
  (per value dim) stays whole and ``out_proj`` is row-parallel.  The
  recurrence is per value head, so each rank's ``LinearStatePool`` holds only
  its own heads' states and conv windows, and they are never communicated;
* the MLP and the LM head as above.

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
from . import cuda_forward
from .gated_deltanet import GatedDeltaNet
from .mtp_head import MTPHead
from .qwen3 import MLP, Attention, ModelConfig, Qwen3Model
from .qwen3_5 import GatedAttention, Qwen35Config, Qwen35Model

__all__ = [
    "ColumnParallelLinear",
    "RowParallelLinear",
    "TensorParallelQwen3",
    "TensorParallelQwen35",
    "linear_channels",
    "shard_head",
    "shard_layer",
    "shard_model",
    "shard_problem",
    "shards_hybrid_targets",
]

shards_hybrid_targets = True  # a capability callers may ask for: hybrid (Gated DeltaNet) targets split too
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


def shard_gated_attention(attn: GatedAttention, tp: TensorParallel) -> None:
    """As ``shard_attention``; ``q_proj`` holds ``[query | gate]`` per head, so a head's rows are ``2 * d``."""
    d = attn.head_dim
    q_lo, q_hi = tp.span(attn.num_heads, "query heads")
    kv_lo, kv_hi = tp.span(attn.num_kv_heads, "KV heads")
    attn.q_proj = _rows(attn.q_proj, q_lo * 2 * d, q_hi * 2 * d)
    attn.k_proj = _rows(attn.k_proj, kv_lo * d, kv_hi * d)
    attn.v_proj = _rows(attn.v_proj, kv_lo * d, kv_hi * d)
    attn.o_proj = RowParallelLinear(attn.o_proj.weight[:, q_lo * d : q_hi * d], tp)
    attn.num_heads, attn.num_kv_heads = q_hi - q_lo, kv_hi - kv_lo


def linear_channels(
    key_heads: int, value_heads: int, key_dim: int, value_dim: int, rank: int, size: int
) -> torch.Tensor:
    """The conv channels (``[q | k | v]``) of rank ``rank``'s key heads and their value heads, in order."""
    qk, hk, hv = key_heads * key_dim, key_heads // size, value_heads // size
    q = torch.arange(rank * hk * key_dim, (rank + 1) * hk * key_dim)
    v = torch.arange(rank * hv * value_dim, (rank + 1) * hv * value_dim)
    return torch.cat([q, qk + q, 2 * qk + v])


def shard_gated_deltanet(layer: GatedDeltaNet, tp: TensorParallel) -> None:
    """Keep this rank's key heads and the value heads grouped with them (see the module docstring)."""
    k_lo, k_hi = tp.span(layer.key_heads, "linear key heads")
    group, dv = layer.value_heads // layer.key_heads, layer.value_dim
    v_lo, v_hi = k_lo * group, k_hi * group
    channels = linear_channels(layer.key_heads, layer.value_heads, layer.key_dim, dv, tp.rank, tp.size)
    w = layer.conv1d.weight
    conv = nn.Conv1d(len(channels), len(channels), layer.kernel, groups=len(channels), bias=False, device="meta")
    conv = conv.to_empty(device=w.device).to(w.dtype).requires_grad_(False)
    with torch.no_grad():
        conv.weight.copy_(w[channels.to(w.device)])
    layer.conv1d = conv
    layer.in_proj_qkv = ColumnParallelLinear(layer.in_proj_qkv.weight[channels.to(w.device)])
    layer.in_proj_z = _rows(layer.in_proj_z, v_lo * dv, v_hi * dv)
    layer.in_proj_b = _rows(layer.in_proj_b, v_lo, v_hi)
    layer.in_proj_a = _rows(layer.in_proj_a, v_lo, v_hi)
    layer.dt_bias = nn.Parameter(layer.dt_bias[v_lo:v_hi].detach().clone(), requires_grad=False)
    layer.A_log = nn.Parameter(layer.A_log[v_lo:v_hi].detach().clone(), requires_grad=False)
    layer.out_proj = RowParallelLinear(layer.out_proj.weight[:, v_lo * dv : v_hi * dv], tp)
    layer.key_heads, layer.value_heads, layer.conv_dim = k_hi - k_lo, v_hi - v_lo, len(channels)


_MIXERS = {Attention: shard_attention, GatedAttention: shard_gated_attention, GatedDeltaNet: shard_gated_deltanet}


def shard_layer(layer: nn.Module, tp: TensorParallel) -> nn.Module:
    """``layer`` (a Qwen3 or hybrid decoder layer) turned, in place, into this rank's share (norms stay whole)."""
    if tp.distributed:
        for name in ("self_attn", "linear_attn"):
            mixer = getattr(layer, name, None)
            if mixer is not None:
                _MIXERS[type(mixer)](mixer, tp)
        shard_mlp(layer.mlp, tp)
    return layer


class VocabParallelHead:
    """The LM head of a tensor-parallel model: ``project`` gives this rank's vocabulary range,
    ``greedy_tokens`` the argmax over the whole vocabulary and ``whole_logits`` the whole rows
    (mixed into a model class)."""

    tp: TensorParallel
    vocab_lo: int
    vocab_hi: int

    def _adopt(self, full: nn.Module, tp: TensorParallel) -> None:
        """Take over ``full``'s submodules (its layers split in place) and its other attributes (config,
        flags); the vocabulary range is this rank's and the KV cache is left to be allocated."""
        for name, child in full.named_children():
            setattr(self, name, child)
        for name, value in vars(full).items():
            if not name.startswith("_"):
                setattr(self, name, value)
        self.tp, self.kv_cache = tp, None
        for layer in self.layers:
            shard_layer(layer, tp)
        vocab_size = full.config.vocab_size
        self.vocab_lo, self.vocab_hi = tp.span(vocab_size, "vocabulary size")
        if vocab_size > EXACT_FLOAT_INDEX:
            raise TPError(f"vocabulary of {vocab_size} exceeds {EXACT_FLOAT_INDEX}")

    def project(
        self, h: torch.Tensor, fast: bool = False, out: torch.Tensor | None = None, tiles: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[N, V / tp]``: the logits of this rank's vocabulary range (a row slice of the head, no copy); ``fast``
        as ``Qwen3Model.project``.  ``out``: a ``[N, V / tp]`` tensor for this rank's range (whole rows come from
        ``whole_logits``).  A rank's range has no tiles of whole rows: ``tiles``' rows are marked unset."""
        if tiles is not None:
            tiles[:, 0].fill_(-1)
        return cuda_forward.lm_head(h, self.lm_head_weight[self.vocab_lo : self.vocab_hi], fast, out)

    def whole_logits(self, logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """``[N, V]``: the whole vocabulary's logits of this rank's ``logits[N, V / tp]``, gathered from every
        rank (one all-gather); written into ``out`` (any float dtype, cast on the copy) when given."""
        rows, span = logits.shape[0], self.vocab_hi - self.vocab_lo
        if logits.dim() != 2 or logits.shape[1] != span:
            raise ValueError(f"whole_logits takes this rank's [N, {span}] logits, got {list(logits.shape)}")
        parts = self.tp.all_gather(logits)  # [tp, N, V / tp]: rank r holds tokens r * span .. (r + 1) * span - 1
        if out is None:
            out = logits.new_empty(rows, span * self.tp.size)
        out.view(rows, self.tp.size, span).copy_(parts.transpose(0, 1))
        return out

    def greedy_tokens(self, logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The argmax over the whole vocabulary from every rank's share; the lowest index wins a tie.

        Each rank's local argmax is its lowest maximal index; the ranks' ranges
        are ascending, so among equal maxima the lowest rank holds the lowest
        index, and ``argmax`` over the gathered maxima picks it.
        """
        idx = logits.argmax(-1)
        best = logits.gather(-1, idx[..., None]).squeeze(-1).float()
        pairs = self.tp.all_gather(torch.stack([best, (idx + self.vocab_lo).float()], -1))  # [tp, ..., 2]
        winner = pairs[..., 0].argmax(0, keepdim=True)
        tokens = pairs[..., 1].gather(0, winner).squeeze(0).long()
        return tokens if out is None else out.copy_(tokens.reshape(out.shape))


class TensorParallelQwen3(VocabParallelHead, Qwen3Model):
    """This rank's share of a ``Qwen3Model``; ``logits`` returns the rank's vocabulary range only.

    Callers take tokens with ``greedy_tokens(logits)``, never ``logits.argmax``.
    """

    def __init__(self, full: Qwen3Model, tp: TensorParallel):
        nn.Module.__init__(self)
        self._adopt(full, tp)


class TensorParallelQwen35(VocabParallelHead, Qwen35Model):
    """This rank's share of a hybrid ``Qwen35Model``: its attention and linear heads (the KV cache and the
    linear-state pool it allocates hold only those), its MLP share and its vocabulary range.

    ``config`` and ``draft_config`` stay the full model's: the drafts over it are whole.
    """

    def __init__(self, full: Qwen35Model, tp: TensorParallel):
        nn.Module.__init__(self)
        self._adopt(full, tp)
        self.linear_state = None  # the whole model's pool would hold every head


def shard_problem(config: ModelConfig | Qwen35Config, size: int) -> str | None:
    """Why ``config`` cannot be split over ``size`` ranks (the first share that does not divide evenly), or None.

    The same shares ``shard_model`` takes, checked before any rank is started; a config with linear-attention
    layers (``linear_num_key_heads``) also splits their key heads (and with them the value heads).
    """
    shares = [
        ("query heads", config.num_heads),
        ("KV heads", config.num_kv_heads),
        ("intermediate size", config.intermediate_size),
        ("vocabulary size", config.vocab_size),
    ]
    if getattr(config, "linear_num_key_heads", None) is not None:
        shares.insert(2, ("linear key heads", config.linear_num_key_heads))
    for what, n in shares:
        if n % size:
            return f"{what} ({n}) does not divide evenly over {size} ranks"
    if config.vocab_size > EXACT_FLOAT_INDEX:
        return f"vocabulary of {config.vocab_size} exceeds {EXACT_FLOAT_INDEX}"
    return None


def shard_model(model: Qwen3Model | Qwen35Model, tp: TensorParallel) -> Qwen3Model | Qwen35Model:
    """``model`` itself on one rank; else this rank's ``TensorParallelQwen3`` or ``TensorParallelQwen35``
    (it shares, and shards, ``model``'s layers in place, so ``model`` is not to be used afterwards).

    A shape that does not split is a ``TPError`` of one line (``shard_problem``), raised before any layer
    is touched.
    """
    if not tp.distributed:
        return model
    why = shard_problem(model.config, tp.size)
    if why is not None:
        raise TPError(why)
    return (TensorParallelQwen35 if isinstance(model, Qwen35Model) else TensorParallelQwen3)(model, tp)


def shard_head(head: MTPHead, tp: TensorParallel) -> MTPHead:
    """The draft body's decoder layer split like the target's (draft TP = target TP); its LM head
    stays whole, so its logits, and its tokens, are the same on every rank without a gather.  A draft
    without one splittable body (a block draft's layers read the whole target shape) stays whole."""
    layer = getattr(head, "layer", None)
    if layer is None:
        raise TPError(f"a {type(head).__name__} runs whole on every rank (draft TP 1); only the MTP body splits")
    shard_layer(layer, tp)
    return head
