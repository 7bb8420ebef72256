"""The Gated DeltaNet layer of a Qwen3.5-style hybrid target, and the pool its linear state lives in.

A linear-attention layer carries, per sequence, a recurrent state ``S`` of
``[value_heads, key_dim, value_dim]`` (float32 whatever the model's dtype) and
a conv window: the last ``kernel - 1`` inputs of the causal conv1d over the
qkv stream.  Both live in a ``LinearStatePool`` of numbered slots, one pool
per model holding every linear layer.  The forward names slots, never copies
them::

    state_read[b]    the slot sequence b reads its initial state from
                     (-1: the zero state, a prompt's start)
    state_write[n]   the slot the state after flat row n is written to
                     (-1: no write, e.g. padding rows)

A prefill reads -1 and writes only at its last prompt row.  A verification of
W rows reads the committed slot and writes the state after each row j into
its own slot, so the next step continues from the slot of the accepted row
without copying a state or asking the host which one survived.  Rows after the
accepted one only wrote slots nobody reads, which is what makes a rejected
token harmless for a recurrent state.  A forward may overwrite the slot it
reads (the read comes first), which is plain decoding with one slot per
sequence; the slots it writes must be distinct, and none of them may be a
slot another sequence reads (the GPU kernels run sequences in any order).

Per token, per value head, in float32 (transformers' Qwen3.5 recurrence, op
for op)::

    q, k = l2norm(q), l2norm(k);  q = q / sqrt(key_dim)
    g    = -exp(A_log) * softplus(a + dt_bias);  beta = sigmoid(b)
    S    = S * exp(g)
    S    = S + k (x) (beta * (v - S^T k))
    o    = S^T q
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .cuda_forward import fused_weight, linear, use_triton

__all__ = ["GatedDeltaNet", "GatedRMSNorm", "LinearStatePool", "l2norm"]


def l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``x / |x|`` over the last axis, as ``x * rsqrt(sum(x^2) + eps)`` (the reference kernels' form)."""
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


class LinearStatePool:
    """Every linear layer's recurrent states ``[num_slots, heads, dk, dv]`` (float32) and conv windows
    ``[num_slots, conv_dim, kernel - 1]`` (the model's dtype: they hold its projections' outputs).

    The storage holds one extra slot past the last; writes whose slot is -1
    land there, which keeps a masked write a fixed-shape ``index_copy_``.
    Reads of -1 give zeros whatever that scratch slot holds.
    """

    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        heads: int,
        key_dim: int,
        value_dim: int,
        conv_dim: int,
        kernel: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        self.num_slots = num_slots
        self._state = torch.zeros(num_layers, num_slots + 1, heads, key_dim, value_dim, device=device)
        self._conv = torch.zeros(num_layers, num_slots + 1, conv_dim, kernel - 1, dtype=dtype, device=device)
        self.recurrent = [self._state[i, :num_slots] for i in range(num_layers)]
        self.conv = [self._conv[i, :num_slots] for i in range(num_layers)]

    def _index(self, slots: torch.Tensor) -> torch.Tensor:
        s = slots.long()
        return torch.where(s >= 0, s, torch.full_like(s, self.num_slots))

    def read(self, layer: int, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The states and windows at ``slots [B]``: ``([B, heads, dk, dv], [B, conv_dim, kernel - 1])``."""
        live = slots.long() >= 0
        idx = self._index(slots)
        state, window = self._state[layer][idx], self._conv[layer][idx]
        return (
            torch.where(live[:, None, None, None], state, torch.zeros_like(state)),
            torch.where(live[:, None, None], window, torch.zeros_like(window)),
        )

    def snapshot(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A copy of every slot of every layer (``restore`` puts it back)."""
        return self._state.clone(), self._conv.clone()

    def restore(self, saved: tuple[torch.Tensor, torch.Tensor]) -> None:
        self._state.copy_(saved[0])
        self._conv.copy_(saved[1])

    def layer_storage(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Linear layer ``layer``'s states ``[num_slots + 1, ...]`` and windows, scratch slot included (kernels
        index them by slot and write nothing for -1)."""
        return self._state[layer], self._conv[layer]

    def write(self, layer: int, slots: torch.Tensor, state: torch.Tensor, window: torch.Tensor) -> None:
        """Store ``state[b], window[b]`` at ``slots[b]`` (-1: the scratch slot, i.e. nowhere)."""
        idx = self._index(slots)
        self._state[layer].index_copy_(0, idx, state.float())
        self._conv[layer].index_copy_(0, idx, window.to(self._conv.dtype))


class GatedRMSNorm(nn.Module):
    """``weight * rmsnorm(x) * silu(gate)`` per value head; the gain starts at one (not zero-centred)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * normed.to(x.dtype) * F.silu(gate.float())).to(x.dtype)


class GatedDeltaNet(nn.Module):
    """Linear attention: conv1d + SiLU over the qkv projection, then the gated delta rule per value head.

    ``cfg`` carries ``hidden_size``, ``rms_eps`` and the ``linear_*`` fields of
    the hybrid config.  Key heads serve ``value_heads / key_heads``
    consecutive value heads.
    """

    def __init__(self, cfg):
        super().__init__()
        self.key_heads, self.value_heads = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.key_dim, self.value_dim = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.kernel = cfg.linear_conv_kernel_dim
        qk = self.key_heads * self.key_dim
        vd = self.value_heads * self.value_dim
        self.conv_dim = 2 * qk + vd
        self.in_proj_qkv = nn.Linear(cfg.hidden_size, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(cfg.hidden_size, vd, bias=False)
        self.in_proj_b = nn.Linear(cfg.hidden_size, self.value_heads, bias=False)
        self.in_proj_a = nn.Linear(cfg.hidden_size, self.value_heads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.value_heads))
        self.A_log = nn.Parameter(torch.zeros(self.value_heads))
        self.norm = GatedRMSNorm(self.value_dim, cfg.rms_eps)
        self.out_proj = nn.Linear(vd, cfg.hidden_size, bias=False)
        self.kernels = "auto"  # as Qwen3Model.forward_kernels: "auto", "torch" or "triton"

    def forward(
        self,
        x: torch.Tensor,
        rows: torch.Tensor,
        state_read: torch.Tensor,
        state_write: torch.Tensor,
        pool: LinearStatePool,
        layer: int,
    ) -> torch.Tensor:
        """``x [N, hidden] -> [N, hidden]``; sequence b owns flat rows ``rows[b, :]`` (``[B, R]``, in order).

        Reads each sequence's state at ``state_read``, writes the state after
        row n at ``state_write[n]``.  Rows no sequence owns give zeros.  On
        CUDA (``kernels``: ``"auto"``) three Triton kernels run it
        (``triton_gdn``); elsewhere the torch recurrence below, the exact
        reference.
        """
        if use_triton(self.kernels, x.device):
            return self.forward_triton(x, rows, state_read, state_write, pool, layer)
        return self.forward_torch(x, rows, state_read, state_write, pool, layer)

    def forward_torch(self, x, rows, state_read, state_write, pool: LinearStatePool, layer: int) -> torch.Tensor:
        """The torch recurrence, one row at a time for every sequence at once: the exact reference."""
        n = x.shape[0]
        b, r = rows.shape
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias)  # [N, HV], log decay
        beta = self.in_proj_b(x).sigmoid().float()
        state, window = pool.read(layer, state_read)
        stream = torch.cat([window, self.in_proj_qkv(x)[rows].transpose(1, 2)], dim=-1)  # [B, C, K - 1 + R]
        mixed = F.silu(F.conv1d(stream, self.conv1d.weight, groups=self.conv_dim)).transpose(1, 2)  # [B, R, C]
        q, k, v = self.split_heads(mixed)
        g, beta, writes = g[rows], beta[rows], state_write.long()[rows]
        out = []
        for i in range(r):  # the recurrence: one row at a time, every sequence at once
            state = state * g[:, i].exp()[..., None, None]
            kv_mem = (state * k[:, i, ..., None]).sum(dim=-2)
            delta = (v[:, i] - kv_mem) * beta[:, i, :, None]
            state = state + k[:, i, ..., None] * delta[..., None, :]
            out.append((state * q[:, i, ..., None]).sum(dim=-2))
            pool.write(layer, writes[:, i], state, stream[..., i + 1 : i + self.kernel])
        o = torch.stack(out, dim=1).to(x.dtype).reshape(b * r, self.value_heads, self.value_dim)
        flat = x.new_zeros(n, self.value_heads, self.value_dim).index_copy_(0, rows.reshape(-1), o)
        z = self.in_proj_z(x).view(n, self.value_heads, self.value_dim)
        return self.out_proj(self.norm(flat, z).reshape(n, -1))

    def forward_triton(self, x, rows, state_read, state_write, pool: LinearStatePool, layer: int) -> torch.Tensor:
        """The same forward as three Triton launches around one fused in-projection GEMM."""
        from . import triton_gdn

        c, vd, hv = self.conv_dim, self.value_heads * self.value_dim, self.value_heads
        proj = linear(x, fused_weight(self, ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a")))
        qkv, z, b_raw, a_raw = proj.split([c, vd, hv, hv], dim=-1)
        states, windows = pool.layer_storage(layer)
        mixed = triton_gdn.conv_slots(qkv, self.conv1d.weight, windows, rows, state_read, state_write, pool.num_slots)
        o = triton_gdn.delta_rule_slots(
            mixed,
            a_raw,
            b_raw,
            self.A_log,
            self.dt_bias,
            states,
            rows,
            state_read,
            state_write,
            pool.num_slots,
            self.key_heads,
            self.key_dim,
        )
        h = triton_gdn.gated_rms_norm(o, z, self.norm.weight, self.norm.eps)
        # a tensor-parallel out_proj (another module) all-reduces in its own forward
        return linear(h, self.out_proj.weight) if type(self.out_proj) is nn.Linear else self.out_proj(h)

    def split_heads(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The conv output ``[B, R, C]`` as float32 ``q, k [B, R, HV, dk]`` (normalised, q scaled), ``v``."""
        b, r, _ = mixed.shape
        qk = self.key_heads * self.key_dim
        q, k, v = mixed.float().split([qk, qk, self.value_heads * self.value_dim], dim=-1)
        q = l2norm(q.reshape(b, r, self.key_heads, self.key_dim))
        k = l2norm(k.reshape(b, r, self.key_heads, self.key_dim))
        group = self.value_heads // self.key_heads
        if group > 1:
            q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
        return q / self.key_dim**0.5, k, v.reshape(b, r, self.value_heads, self.value_dim)
