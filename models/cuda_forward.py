"""The fast decoder forward: fused projections and Triton kernels around the GEMMs.

Per layer it launches nine or ten kernels::

    add_rms_norm (previous MLP residual + input norm) -> qkv GEMM -> qk_norm_rope_store
    -> paged_attention (+ attention_merge when the keys are split) -> o GEMM
    -> add_rms_norm (attention residual + post norm) -> gate_up GEMM -> silu_mul -> down GEMM

The MLP's residual add is carried into the next layer's first kernel.  The
q/k/v and gate/up weights are concatenated once, and the layer's own
parameters become views of the fused tensors, so a later ``copy_`` into them
(loading a checkpoint) updates the fused weight too.  Which forward runs is
``Qwen3Model.forward_kernels``: ``"auto"`` (Triton on CUDA where it imports,
else torch), ``"torch"`` or ``"triton"`` (forced; on the CPU only under
``TRITON_INTERPRET=1``, for tests).  Shapes depend only on the batch layout,
so the fast forward captures in a CUDA graph like the torch one.

The LM head of a fast forward (``lm_head``) runs the skinny GEMM for heads
of at most ``SPECGEN_SKINNY_LM_HEAD`` rows (0 to ``skinny_gemm.MAX_HEAD_ROWS``;
default ``LM_HEAD_ROWS``, 64; 0: always cuBLAS).  At Qwen3-0.6B's head
(151936 x 1024, weight streamed from memory) it takes 72.8-85.2 us against
cuBLAS's 77.0-86.9 us from 1 to 64 rows on an H200, and 106.4 against 91.0 us
at 128 rows, where cuBLAS stays; it puts no memset node in a captured graph,
where cuBLAS puts one before the head's GEMM.
``SPECGEN_SKINNY_GEMM=0`` turns it off with the other skinny products.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

KERNEL_CHOICES = ("auto", "torch", "triton")
MAX_HEAD_ROWS = 128  # skinny_gemm.MAX_HEAD_ROWS (that module imports triton; this one must not)
TALL_ROWS = 32  # skinny_gemm.TALL_ROWS: the projections' rows past 16 for the shapes of skinny_gemm.TUNED_TALL
LM_HEAD_ROWS = 64  # the default limit: past 64 rows cuBLAS is faster on an H200 (91.0 against 106.4 us at 128)


@functools.cache
def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def use_triton(choice: str, device: torch.device) -> bool:
    """Whether a forward on ``device`` with ``forward_kernels=choice`` runs the Triton kernels."""
    if choice not in KERNEL_CHOICES:
        raise ValueError(f"forward_kernels must be one of {KERNEL_CHOICES}, not {choice!r}")
    if choice == "torch":
        return False
    if choice == "triton":
        if not triton_available():
            raise RuntimeError("forward_kernels='triton' needs the triton package")
        return True
    return device.type == "cuda" and triton_available()


@functools.cache
def _kernels():
    from . import triton_kernels

    return triton_kernels


@functools.cache
def _skinny():
    from . import skinny_gemm

    return skinny_gemm


def _use_skinny(h: torch.Tensor, weight: torch.Tensor, partial: bool = False) -> bool:
    """Whether ``h @ weight.T`` takes the skinny GEMM: at most 16 rows, or up to ``TALL_ROWS`` where the weight's
    shape has a measured tall config (``skinny_gemm.tall_config``); never under ``SPECGEN_SKINNY_GEMM=0``."""
    rows = h.shape[0]
    if os.environ.get("SPECGEN_SKINNY_GEMM", "1") in ("", "0") or rows > TALL_ROWS:
        return False
    return rows <= 16 or _skinny().tall_config(weight.shape[0], weight.shape[1], partial) is not None


def linear(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``h @ weight.T``: the skinny GEMM where ``_use_skinny`` says so, else cuBLAS."""
    return _skinny().skinny_gemm(h, weight) if _use_skinny(h, weight) else F.linear(h, weight)


def lm_head_rows(tiles: bool = False) -> int:
    """The most rows ``lm_head`` gives the skinny GEMM: ``SPECGEN_SKINNY_LM_HEAD`` (default ``LM_HEAD_ROWS``, or
    with ``tiles`` asked for ``MAX_HEAD_ROWS``; 0: none), and 0 under ``SPECGEN_SKINNY_GEMM=0``."""
    if os.environ.get("SPECGEN_SKINNY_GEMM", "1") in ("", "0"):
        return 0
    raw = os.environ.get("SPECGEN_SKINNY_LM_HEAD", str(MAX_HEAD_ROWS if tiles else LM_HEAD_ROWS))
    try:
        rows = int(raw or "0")
    except ValueError:
        rows = -1
    if not 0 <= rows <= MAX_HEAD_ROWS:
        raise ValueError(f"SPECGEN_SKINNY_LM_HEAD must be a row limit from 0 to {MAX_HEAD_ROWS}, not {raw!r}")
    return rows


def lm_head(
    h: torch.Tensor,
    weight: torch.Tensor,
    fast: bool = True,
    out: torch.Tensor | None = None,
    tiles: torch.Tensor | None = None,
) -> torch.Tensor:
    """An LM head ``h @ weight.T``: in a fast forward (``fast``) the skinny GEMM for at most ``lm_head_rows()`` rows
    (no memset node in a captured graph), else cuBLAS (also for no rows: the skinny GEMM would stream the weight for
    nothing); a torch forward's (``fast=False``) is cuBLAS whatever the switch says.

    ``out`` (``[rows, V]``, contiguous rows, e.g. a float32 buffer of a vocabulary pass) takes the logits and is
    returned: on CUDA both GEMMs write their float32 sums into it cast once to its dtype, so a float32 ``out``
    holds logits that were never rounded to ``h``'s dtype (no widening copy after the head); on the CPU the
    product in ``h``'s dtype is copied in.

    ``tiles`` (int64 ``[rows, ceil(V / 64)]``, a vocabulary pass's ``VocabPass.tiles`` rows) takes the logits'
    tiles where the skinny GEMM runs (for up to ``MAX_HEAD_ROWS`` rows by default: the tiles spare the vocabulary
    pass a read of every row); on every other path its rows are marked unset (entry 0 is -1), never left stale."""
    rows = h.shape[0]
    if out is not None and (out.dim() != 2 or out.shape[0] != rows or out.shape[1] != weight.shape[0]):
        raise ValueError(f"lm_head writes [{rows}, {weight.shape[0]}] logits, not into {list(out.shape)}")
    if tiles is not None and (tiles.dim() != 2 or tiles.shape[0] != rows or tiles.dtype != torch.int64):
        raise ValueError(f"lm_head writes int64 [{rows}, (V + 63) // 64] tiles, not into {list(tiles.shape)}")
    if fast and 0 < rows <= lm_head_rows(tiles is not None):
        return _skinny().skinny_gemm(h, weight, out=out, tiles=tiles)
    if tiles is not None:
        tiles[:, 0].fill_(-1)
    if out is None:
        return F.linear(h, weight)
    if h.is_cuda and out.dtype == torch.float32 and h.dtype in (torch.float16, torch.bfloat16):
        return torch.mm(h, weight.t(), out_dtype=torch.float32, out=out)
    return out.copy_(F.linear(h, weight))


def projection(module: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
    """A projection whose output feeds ``add_rms_norm``: with the skinny GEMM on a plain ``nn.Linear``,
    float32 split-K partials (summed by ``add_rms_norm``); otherwise the module's own output."""
    if type(module) is torch.nn.Linear and _use_skinny(h, module.weight, partial=True):
        return _skinny().skinny_gemm(h, module.weight, partial=True)
    return module(h)


def argmax(logits: torch.Tensor, choice: str, out: torch.Tensor | None = None) -> torch.Tensor:
    """``logits.argmax(-1)`` (lowest index on ties, a NaN above every number), into ``out`` when given (an
    integer tensor with one element per row, e.g. a verify step's int32 ``target_tokens``: no casting copy).

    With the Triton kernels (``use_triton(choice, ...)``) the two launches of ``triton_argmax``; otherwise
    ``torch.argmax``, copied into ``out``.  Both give the same indices.
    """
    if use_triton(choice, logits.device) and logits.shape[-1] > 0:
        from .triton_argmax import argmax_rows

        if out is None or (out.is_contiguous() and out.dtype in (torch.int32, torch.int64)):
            return argmax_rows(logits, out)
    idx = logits.argmax(-1)
    if out is None:
        return idx
    out.copy_(idx.reshape(out.shape))
    return out


def materialize(x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """``x + delta`` where ``delta`` is an output or float32 partials ``[splits, N, hidden]``."""
    if delta.dim() == 3:
        return (x.float() + delta.sum(0)).to(x.dtype)
    return x + delta


@dataclass(slots=True)
class FastBatch:
    """The metadata the Triton kernels read directly (no per-forward derived tensors)."""

    positions: torch.Tensor  # [N]
    slots: torch.Tensor  # [N], -1: no write
    block_table: torch.Tensor  # [B, BT]
    kv_lens: torch.Tensor  # [B]
    query_start_loc: torch.Tensor  # [B + 1]
    rows_per_seq: int
    rope_theta: float
    row_index: torch.Tensor | None = None  # [B, R] flat rows (the hybrid's linear layers read them)
    rotary_dim: int = 0  # the rotated leading dims of a head (partial RoPE; the dense forward rotates all)
    kv_start: int = 0  # keys below this position are not attended (an MTP head's cache)


_INV_FREQ: dict[tuple, torch.Tensor] = {}


def rope_inv_freq(head_dim: int, theta: float, device: torch.device) -> torch.Tensor:
    """``1 / theta ** (2i / D)`` in float32, by the same ops as ``AttentionBatch.build`` (same bits).

    Kept per device once made outside a graph capture; inside one it is made
    afresh (a tensor from the capture's pool must not outlive the graph).
    """
    key = (head_dim, theta, str(device))
    t = _INV_FREQ.get(key)
    if t is None:
        half = torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim
        t = 1.0 / (theta**half)
        if device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
            _INV_FREQ[key] = t
    return t


def fused_weight(owner: torch.nn.Module, names: tuple[str, ...]) -> torch.Tensor:
    """``cat([owner.<name>.weight ...])``, made once; the parts then view the fused tensor.

    Rebuilt when a part's weight is a different tensor (a module replaced,
    e.g. by tensor-parallel sharding, or moved).
    """
    parts = [getattr(owner, n).weight for n in names]
    key = "_fused_" + "_".join(names)
    cached = owner.__dict__.get(key)
    if cached is not None and cached[1] == [p.data_ptr() for p in parts]:
        return cached[0]
    fused = torch.cat([p.detach() for p in parts])
    lo = 0
    for p in parts:
        p.data = fused[lo : lo + p.shape[0]]
        lo += p.shape[0]
    owner.__dict__[key] = (fused, [p.data_ptr() for p in parts])
    return fused


def attention(attn, h: torch.Tensor, batch: FastBatch, cache, layer: int) -> torch.Tensor:
    """The attention block on normed ``h [N, hidden]``: K/V written, output projected."""
    k = _kernels()
    kc, vc = cache.layer_storage(layer)
    qkv = linear(h, fused_weight(attn, ("q_proj", "k_proj", "v_proj")))
    q = k.qk_norm_rope_store(
        qkv,
        attn.q_norm.weight,
        attn.k_norm.weight,
        batch.positions,
        batch.slots,
        kc,
        vc,
        attn.num_heads,
        attn.num_kv_heads,
        attn.q_norm.eps,
        rope_inv_freq(attn.head_dim, batch.rope_theta, h.device),
    )
    o = k.paged_attention(
        q,
        kc,
        vc,
        batch.block_table,
        batch.kv_lens,
        batch.positions,
        batch.query_start_loc,
        batch.rows_per_seq,
        cache.block_size,
    )
    return projection(attn.o_proj, o.view(h.shape[0], -1))


def kv_rows(attn, h: torch.Tensor) -> torch.Tensor:
    """``k|v [N, 2 * kv_heads * D]`` of normed ``h [N, hidden]``: the attention block's k|v GEMM alone (a block
    draft's context, whose rows need no query)."""
    return linear(h, fused_weight(attn, ("k_proj", "v_proj")))


def store_kv_rows(attn, kv: torch.Tensor, positions, slots, k_cache, v_cache, rope_theta: float) -> None:
    """``kv_rows``' K (normed, rotated) and V into ``k_cache, v_cache [S + 1, kv_heads, D]`` at ``slots`` (-1: no
    write): ``qk_norm_rope_store`` without queries."""
    w = attn.k_norm.weight  # the kernel's query norm weight: no query head reads it
    _kernels().qk_norm_rope_store(
        kv,
        w,
        w,
        positions,
        slots,
        k_cache,
        v_cache,
        0,
        attn.num_kv_heads,
        attn.k_norm.eps,
        rope_inv_freq(attn.head_dim, rope_theta, kv.device),
    )


def store_kv(attn, h: torch.Tensor, positions, slots, k_cache, v_cache, rope_theta: float) -> None:
    """K (normed, rotated) and V of normed ``h [N, hidden]`` into ``k_cache, v_cache`` at ``slots``: ``kv_rows``
    then ``store_kv_rows``."""
    store_kv_rows(attn, kv_rows(attn, h), positions, slots, k_cache, v_cache, rope_theta)


def mlp(m, h: torch.Tensor) -> torch.Tensor:
    return projection(m.down_proj, _kernels().silu_mul(linear(h, fused_weight(m, ("gate_proj", "up_proj")))))


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, norm) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x + delta, norm(x + delta))`` in one kernel; ``norm`` is an ``RMSNorm`` module."""
    return _kernels().add_rms_norm(x, delta, norm.weight, norm.eps)


def layer(
    dec, x: torch.Tensor, delta: torch.Tensor | None, batch: FastBatch, cache, i: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoder layer on the residual ``x + delta``; returns the next ``(x, delta)``."""
    x, h = add_rms_norm(x, delta, dec.input_layernorm)
    x, h = add_rms_norm(x, attention(dec.self_attn, h, batch, cache, i), dec.post_attention_layernorm)
    return x, mlp(dec.mlp, h)
