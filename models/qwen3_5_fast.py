"""The hybrid target's forward on CUDA: fused projections and Triton kernels where the torch path chains small ops.

``Qwen35Model.hybrid_kernels`` picks it (``"auto"``: on CUDA where Triton
imports; ``"torch"``: the reference everywhere; ``"triton"``: forced, on the
CPU only under ``TRITON_INTERPRET=1``, for tests).  Per layer:

* Gated DeltaNet layers: ``GatedDeltaNet._forward_triton`` (one fused
  in-projection GEMM, the conv and the delta rule reading and writing the
  linear state by slot, the gated norm; ``triton_gdn``);
* gated full attention: one fused q / gate / k / v GEMM, the per-head norms
  and partial RoPE in torch, K/V written at the rows' slots and the fast
  forward's Triton paged attention over the block table (no gather of the
  whole table), the output gate, ``o_proj``;
* the MLP as the dense fast forward's (fused gate-up GEMM, ``silu_mul``);
* each zero-centred RMSNorm one ``add_rms_norm`` launch of the dense fast
  forward (the one after the mixer taking the residual add too), with the gain
  ``1 + weight`` made once per weight version (elsewhere on CUDA: one
  ``F.rms_norm`` in float32).

The shapes depend only on the batch layout, so it captures in a CUDA graph;
the CPU keeps the torch path, the exact reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import cuda_forward
from .cuda_forward import FastBatch, fused_weight, linear
from .qwen3 import partial_rope

__all__ = ["attention", "fast_batch", "layer", "mlp", "rms_norm"]


def fast_batch(kernels: str, positions, slot_mapping, block_table, kv_lens, query_start_loc, rows, theta):
    """The metadata the Triton kernels read, or ``None`` where ``kernels`` picks the torch path on this device."""
    if not cuda_forward.use_triton(kernels, positions.device):
        return None
    return FastBatch(positions, slot_mapping, block_table, kv_lens, query_start_loc, rows, theta)


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


def attention(attn, x: torch.Tensor, batch, fast: FastBatch, cache, layer: int) -> torch.Tensor:
    """``GatedAttention`` on normed ``x [N, hidden]``: K/V written at the rows' slots, output gated and projected."""
    from . import triton_kernels

    n, h, kvh, d = x.shape[0], attn.num_heads, attn.num_kv_heads, attn.head_dim
    proj = linear(x, fused_weight(attn, ("q_proj", "k_proj", "v_proj")))
    qg, k, v = proj.split([2 * h * d, kvh * d, kvh * d], dim=-1)
    q, gate = qg.reshape(n, h, 2 * d).chunk(2, dim=-1)
    q = partial_rope(rms_norm(attn.q_norm, q), batch.cos, batch.sin)
    k = partial_rope(rms_norm(attn.k_norm, k.reshape(n, kvh, d)), batch.cos, batch.sin)
    cache.write(layer, fast.slots, k, v.reshape(n, kvh, d))
    kc, vc = cache.layer_storage(layer)
    o = triton_kernels.paged_attention(
        q.contiguous(),
        kc,
        vc,
        fast.block_table,
        fast.kv_lens,
        fast.positions,
        fast.query_start_loc,
        fast.rows_per_seq,
        cache.block_size,
    )
    o = o.reshape(n, h * d) * torch.sigmoid(gate.reshape(n, h * d))
    return linear(o, attn.o_proj.weight) if type(attn.o_proj) is nn.Linear else attn.o_proj(o)


def layer(dec, x: torch.Tensor, batch) -> torch.Tensor:
    """One decoder layer (``qwen3_5.DecoderLayer``) on ``x``: each norm one ``add_rms_norm`` launch, the
    post-mixer one taking the residual add too."""
    from . import triton_kernels

    _, h = triton_kernels.add_rms_norm(x, None, _gain(dec.input_layernorm), dec.input_layernorm.eps)
    if dec.kind == "linear_attention":
        rows = batch.attention.row_index
        h = dec.linear_attn.forward_triton(h, rows, batch.state_read, batch.state_write, batch.pool, dec.index)
    else:
        h = attention(dec.self_attn, h, batch.attention, batch.fast, batch.kv_cache, dec.index)
    norm = dec.post_attention_layernorm
    x, h = triton_kernels.add_rms_norm(x, h, _gain(norm), norm.eps)
    return x + mlp(dec.mlp, h)


def mlp(m, x: torch.Tensor) -> torch.Tensor:
    """``down(silu(gate(x)) * up(x))`` with one gate-up GEMM and the fast forward's ``silu_mul``."""
    from . import triton_kernels

    h = triton_kernels.silu_mul(linear(x, fused_weight(m, ("gate_proj", "up_proj"))))
    return linear(h, m.down_proj.weight) if type(m.down_proj) is nn.Linear else m.down_proj(h)
