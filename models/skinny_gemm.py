"""``x @ w.T`` for a few rows (a decode step's M <= 16), split over K when N alone cannot fill the GPU.

cuBLAS runs these shapes at a fraction of the memory bandwidth (a 1024-wide
output is 16 tiles: 16 SMs stream the whole weight).  Here each program
streams a ``BLOCK_N x K / splits`` slab of the weight; with more than one
split the result is float32 partial sums ``[splits, M, N]`` that the consumer
adds up (``fast_kernels.add_rms_norm`` takes them as its ``y``), so the split
costs no extra launch.  On by default for at most ``MAX_ROWS`` rows
(``SPECGEN_SKINNY_GEMM=0`` turns it off), measured by ``benchmarks/forward_speed.py``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_ROWS = 16
BLOCK_N = 64
BLOCK_K = 128
TARGET_PROGRAMS = 132


@triton.jit
def _skinny_gemm_kernel(
    x,
    w,
    out,
    M,
    N,
    K,
    K_PER_SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLITS: tl.constexpr,
    IEEE: tl.constexpr,
):
    pn = tl.program_id(0)
    ps = tl.program_id(1)
    m = tl.arange(0, BLOCK_M)
    n = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for kk in range(0, K_PER_SPLIT, BLOCK_K):
        k = ps * K_PER_SPLIT + kk + tl.arange(0, BLOCK_K)
        xt = tl.load(x + m[:, None].to(tl.int64) * K + k[None, :], mask=(m[:, None] < M) & (k[None, :] < K), other=0.0)
        wt = tl.load(w + n[:, None].to(tl.int64) * K + k[None, :], mask=(n[:, None] < N) & (k[None, :] < K), other=0.0)
        if IEEE:
            acc += tl.dot(xt, tl.trans(wt), input_precision="ieee")
        else:
            acc += tl.dot(xt, tl.trans(wt))
    ok = (m[:, None] < M) & (n[None, :] < N)
    if SPLITS == 1:
        tl.store(out + m[:, None].to(tl.int64) * N + n[None, :], acc.to(out.dtype.element_ty), mask=ok)
    else:
        tl.store(out + (ps * M + m[:, None].to(tl.int64)) * N + n[None, :], acc, mask=ok)


def splits_for(n: int, k: int) -> int:
    """K splits: enough programs for one wave, each still at least two ``BLOCK_K`` steps."""
    tiles = -(-n // BLOCK_N)
    s = 1
    while tiles * s * 2 <= TARGET_PROGRAMS and k // (s * 2) >= 2 * BLOCK_K:
        s *= 2
    return s


def skinny_gemm(x: torch.Tensor, w: torch.Tensor, partial: bool = False) -> torch.Tensor:
    """``x [M, K] @ w [N, K].T``: ``[M, N]`` in ``x``'s dtype, or with ``partial`` possibly float32
    partials ``[splits, M, N]`` (a 2-D result when one split suffices)."""
    m, k = x.shape
    n = w.shape[0]
    if m > MAX_ROWS:
        raise ValueError(f"skinny_gemm takes at most {MAX_ROWS} rows, not {m}")
    splits = splits_for(n, k) if partial else 1
    per = -(-k // splits)
    per = -(-per // BLOCK_K) * BLOCK_K
    out = (
        torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
        if splits > 1
        else torch.empty(m, n, dtype=x.dtype, device=x.device)
    )
    _skinny_gemm_kernel[(-(-n // BLOCK_N), splits)](
        x.contiguous(),
        w,
        out,
        m,
        n,
        k,
        K_PER_SPLIT=per,
        BLOCK_M=16,
        BLOCK_N=BLOCK_N,
        BLOCK_K=BLOCK_K,
        SPLITS=splits,
        IEEE=x.dtype == torch.float32,
        num_stages=3 if x.dtype != torch.float32 else 2,
    )
    return out
