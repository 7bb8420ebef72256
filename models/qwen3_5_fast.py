"""The hybrid target's forward on CUDA: fused projections and Triton kernels where the torch path chains small ops.

``Qwen35Model.hybrid_kernels`` picks it (``"auto"``: on CUDA where Triton
imports; ``"torch"``: the reference everywhere; ``"triton"``: forced, on the
CPU only under ``TRITON_INTERPRET=1``, for tests).  Per layer:

* Gated DeltaNet layers: ``GatedDeltaNet._forward_triton`` (one fused
  in-projection GEMM, the conv and the delta rule reading and writing the
  linear state by slot, the gated norm; ``triton_gdn``);
* gated full attention: one fused q / gate / k / v GEMM, then one launch for
  the per-head norms, the partial RoPE and the K/V store at the rows' slots
  (``triton_gated_attention``), the fast forward's Triton paged attention
  over the block table (no gather of the whole table; ``kv_start`` for a
  cache that begins past position 0), the output gate in one launch,
  ``o_proj``;
* the MLP as the dense fast forward's (fused gate-up GEMM, ``silu_mul``);
* each zero-centred RMSNorm one ``add_rms_norm`` launch of the dense fast
  forward, with the gain ``1 + weight`` made once per weight version; the
  projections before a norm (``out_proj``, ``o_proj``, ``down_proj``) hand it
  their split-K partials and the residual add, so the MLP's output is carried
  into the next layer's first launch and the last one into the final norm.

The shapes depend only on the batch layout, so it captures in a CUDA graph;
the CPU keeps the torch path, the exact reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import cuda_forward
from .cuda_forward import FastBatch, fused_weight, linear, materialize, projection

__all__ = ["attention", "fast_batch", "final_norm", "layer", "layer_carry", "mlp", "rms_norm"]


def fast_batch(
    kernels: str,
    positions,
    slot_mapping,
    block_table,
    kv_lens,
    query_start_loc,
    rows: int,
    cfg,
    kv_start: int = 0,
    row_index: bool = True,
) -> FastBatch | None:
    """The metadata the Triton kernels read, or ``None`` where ``kernels`` picks the torch path on this device.

    ``row_index`` (the linear layers' flat row of each sequence's rows) is made only where asked for."""
    if not cuda_forward.use_triton(kernels, positions.device):
        return None
    index = None
    if row_index:
        index = query_start_loc.long()[:-1, None] + torch.arange(rows, device=positions.device)
    return FastBatch(
        positions,
        slot_mapping,
        block_table,
        kv_lens,
        query_start_loc,
        rows,
        cfg.rope_theta,
        index,
        cfg.rotary_dim,
        kv_start,
    )


def _gain(norm: nn.Module) -> torch.Tensor:
    """``1 + weight`` in float32, kept per weight tensor and version (a ``copy_`` into the weight remakes it)."""
    w = norm.weight
    key = (w.data_ptr(), w._version, w.device)
    cached = norm.__dict__.get("_gain")
    if cached is not None and cached[0] == key:
        return cached[1]
    gain = 1.0 + w.detach().float()
    if w.device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
        norm.__dict__["_gain"] = (key, gain)
    return gain


def rms_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A ``ZeroCenteredRMSNorm``: the mean of squares and the gain in float32, rounded once."""
    return F.rms_norm(x.float(), (x.shape[-1],), _gain(norm), norm.eps).to(x.dtype)


def attention(attn, x: torch.Tensor, fast: FastBatch, cache, layer: int) -> torch.Tensor:
    """``GatedAttention`` on normed ``x [N, hidden]``: K/V written at the rows' slots, output gated; returns
    ``o_proj``'s output as ``projection`` gives it (float32 split-K partials where the skinny GEMM runs)."""
    from . import triton_gated_attention as tga
    from . import triton_kernels

    kvh = attn.num_kv_heads
    proj = linear(x, fused_weight(attn, ("q_proj", "k_proj", "v_proj")))
    kc, vc = cache.layer_storage(layer)
    q = tga.gated_qk_norm_rope_store(
        proj,
        _gain(attn.q_norm),
        _gain(attn.k_norm),
        fast.positions,
        fast.slots,
        kc,
        vc,
        attn.num_heads,
        kvh,
        attn.q_norm.eps,
        cuda_forward.rope_inv_freq(fast.rotary_dim, fast.rope_theta, x.device),
    )
    o = triton_kernels.paged_attention(
        q,
        kc,
        vc,
        fast.block_table,
        fast.kv_lens,
        fast.positions,
        fast.query_start_loc,
        fast.rows_per_seq,
        cache.block_size,
        fast.kv_start,
    )
    return projection(attn.o_proj, tga.sigmoid_gate_mul(o, proj, kvh))


def layer_carry(dec, x: torch.Tensor, delta: torch.Tensor | None, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoder layer (``qwen3_5.DecoderLayer``) on the residual ``x + delta``; returns the next
    ``(x, delta)``: the MLP's output is carried into the next norm's launch, as the dense fast forward does."""
    from . import triton_kernels

    x, h = triton_kernels.add_rms_norm(x, delta, _gain(dec.input_layernorm), dec.input_layernorm.eps)
    if dec.kind == "linear_attention":
        h = dec.linear_attn.forward_triton(
            h, batch.fast.row_index, batch.state_read, batch.state_write, batch.pool, dec.index
        )
    else:
        h = attention(dec.self_attn, h, batch.fast, batch.kv_cache, dec.index)
    norm = dec.post_attention_layernorm
    x, h = triton_kernels.add_rms_norm(x, h, _gain(norm), norm.eps)
    return x, mlp(dec.mlp, h)


def layer(dec, x: torch.Tensor, batch) -> torch.Tensor:
    """One decoder layer on ``x``, its output materialised."""
    return materialize(*layer_carry(dec, x, None, batch))


def final_norm(norm: nn.Module, x: torch.Tensor, delta: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x + delta, norm(x + delta))`` for a ``ZeroCenteredRMSNorm``, in one launch."""
    from . import triton_kernels

    return triton_kernels.add_rms_norm(x, delta, _gain(norm), norm.eps)


def mlp(m, x: torch.Tensor) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))`` with one gate-up GEMM and the fast forward's ``silu_mul``; the down
    projection as ``projection`` gives it (the next ``add_rms_norm`` sums its partials)."""
    from . import triton_kernels

    return projection(m.down_proj, triton_kernels.silu_mul(linear(x, fused_weight(m, ("gate_proj", "up_proj")))))
