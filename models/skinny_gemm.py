"""``x @ w.T`` for a few rows (a decode step's M <= 16), split over K when N alone cannot fill the GPU.

cuBLAS runs these shapes at a fraction of the memory bandwidth (a 1024-wide
output is 16 tiles: 16 SMs stream the whole weight).  Here each program
streams a ``block_n x K / splits`` slab of the weight; with more than one
split the result is float32 partial sums ``[splits, M, N]`` that the consumer
adds up (``fast_kernels.add_rms_norm`` takes them as its ``y``), so the split
costs no extra launch.  On by default for at most ``MAX_ROWS`` rows
(``SPECGEN_SKINNY_GEMM=0`` turns it off).

Up to ``MAX_HEAD_ROWS`` rows run as one M tile of the next power of two (the
weight is still streamed once): the LM head's product, which
``cuda_forward.lm_head`` takes here on request, since inside a CUDA graph
cuBLAS puts a memset node before it and this kernel puts none.  Taller tiles
take shorter K steps or fewer stages where that is faster or must fit in
shared memory (``tall``).

The tile and split per weight shape come from ``TUNED`` where the shape was
measured on the H200 (``benchmarks/skinny_gemm_sweep.py``), else from
``heuristic``.  ``SPECGEN_SKINNY_TABLE=sweep.json`` takes the table of a
sweep run on another GPU instead (its entries replace ``TUNED``'s).

Past 16 rows and up to ``TALL_ROWS`` (a verify step of 8 sequences at W = 4)
an ordinary projection takes the skinny GEMM only where ``TUNED_TALL`` has its
weight shape: there ``skinny_gemm_sweep.py --tall`` measured a config faster
than cuBLAS (``tall_config``; a sweep file's ``tall_table`` replaces its
entries too).  ``SPECGEN_SKINNY_TALL=0`` gives those rows back to cuBLAS.

An LM head's product may write its logits' tiles beside them (``tiles``): per ``LOGIT_TILE`` columns of a row,
the largest non-NaN value and how many are not NaN (``runtime.vocab_pass.logit_tiles_of``'s layout), which the
vocabulary pass then reads instead of a pass over the rows.
"""

from __future__ import annotations

import functools
import json
import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from ..specializations.vocab_sample import LOGIT_TILE  # the columns of a logit tile

MAX_ROWS = 16  # the ordinary projections' limit (cuda_forward._use_skinny)
TALL_ROWS = 32  # past MAX_ROWS, the limit of the shapes in TUNED_TALL (cuda_forward.TALL_ROWS)
MAX_HEAD_ROWS = 128  # the kernel's own: one M tile (the LM head, cuda_forward.lm_head)
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
TARGET_PROGRAMS = 132  # one wave of an H200's SMs
SMEM_BYTES = 200 * 1024  # the pipelined tiles' share of a block's shared memory (227 KB on the H100 and H200)


class Config(NamedTuple):
    block_n: int
    block_k: int
    splits: int
    warps: int
    stages: int


# (N, K, partial allowed) -> config: the table of benchmarks/skinny_gemm_sweep.py on the H200 (the least time
# summed over 1, 2, 4, 8 and 16 rows, weights streamed cold), benchmarks/results/skinny_gemm/sweep_qwen3.5-2b.json
TUNED: dict[tuple[int, int, bool], Config] = {
    (8224, 2048, False): Config(64, 128, 1, 4, 5),  # Qwen3.5-2B: a linear layer's fused in-projection
    (2048, 2048, True): Config(64, 128, 8, 4, 3),  # out_proj / o_proj
    (5120, 2048, False): Config(64, 128, 1, 4, 5),  # gated attention's q / gate / k / v
    (12288, 2048, False): Config(32, 128, 1, 4, 4),  # gate-up
    (2048, 6144, True): Config(64, 128, 8, 4, 3),  # down
    (2048, 4096, False): Config(16, 256, 1, 4, 4),  # the MTP head's fc
}

# (N, K, partial allowed) -> config at 17 .. TALL_ROWS rows, only for the shapes where the best of
# skinny_gemm_sweep.py --tall's grid beat cuBLAS at 32 rows by 3% (the rest stay cuBLAS's), measured on an H100:
# benchmarks/results/skinny_gemm/tall_qwen3.5-2b_h100.json
TUNED_TALL: dict[tuple[int, int, bool], Config] = {
    (2048, 2048, True): Config(32, 128, 4, 4, 4),  # Qwen3.5-2B out_proj / o_proj: 5.6 us against cuBLAS's 6.5
    (12288, 2048, False): Config(32, 128, 1, 4, 4),  # gate-up: 20.3 against 21.0
    (2048, 6144, True): Config(32, 128, 4, 4, 4),  # down: 11.2 against 14.0
}


@triton.jit
def _step(x, w, acc, m, n, k_lo, M, N, K, BLOCK_K: tl.constexpr, IEEE: tl.constexpr):
    """``acc += x[:, k] @ w[n, k].T`` over ``k = k_lo .. k_lo + BLOCK_K`` (past ``K``: nothing)."""
    k = k_lo + tl.arange(0, BLOCK_K)
    xt = tl.load(x + m[:, None].to(tl.int64) * K + k[None, :], mask=(m[:, None] < M) & (k[None, :] < K), other=0.0)
    wt = tl.load(w + n[:, None].to(tl.int64) * K + k[None, :], mask=(n[:, None] < N) & (k[None, :] < K), other=0.0)
    if IEEE:
        return acc + tl.dot(xt, tl.trans(wt), input_precision="ieee")
    return acc + tl.dot(xt, tl.trans(wt))


@triton.jit
def _skinny_gemm_kernel(
    x,
    w,
    out,
    tiles,
    M,
    N,
    K,
    k_per_split,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PARTIAL: tl.constexpr,
    IEEE: tl.constexpr,
    INTERPRET: tl.constexpr,
    TILES: tl.constexpr,
    TILE: tl.constexpr,
):
    pn = tl.program_id(0)
    ps = tl.program_id(1)
    m = tl.arange(0, BLOCK_M)
    n = pn * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    k0 = ps * k_per_split
    if INTERPRET:  # the interpreter cannot take tensor bounds in range(); same steps, same order
        kk = 0
        while kk < k_per_split:
            acc = _step(x, w, acc, m, n, k0 + kk, M, N, K, BLOCK_K, IEEE)
            kk += BLOCK_K
    else:
        for kk in range(0, k_per_split, BLOCK_K):  # a for loop: Triton pipelines its loads
            acc = _step(x, w, acc, m, n, k0 + kk, M, N, K, BLOCK_K, IEEE)
    ok = (m[:, None] < M) & (n[None, :] < N)
    if PARTIAL:
        tl.store(out + (ps * M + m[:, None].to(tl.int64)) * N + n[None, :], acc, mask=ok)
    else:
        val = acc.to(out.dtype.element_ty)
        tl.store(out + m[:, None].to(tl.int64) * N + n[None, :], val, mask=ok)
        if TILES:  # each TILE columns' largest non-NaN value (float bits, low) and count of non-NaN ones (high)
            v = val.to(tl.float32)
            good = ok & (v == v)
            top = tl.max(tl.reshape(tl.where(good, v, float("-inf")), [BLOCK_M, BLOCK_N // TILE, TILE]), axis=2)
            cnt = tl.sum(tl.reshape(good.to(tl.int32), [BLOCK_M, BLOCK_N // TILE, TILE]), axis=2)
            packed = (cnt.to(tl.int64) << 32) | (top.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)
            q = pn * (BLOCK_N // TILE) + tl.arange(0, BLOCK_N // TILE)
            nt = (N + TILE - 1) // TILE
            tl.store(
                tiles + m[:, None].to(tl.int64) * nt + q[None, :], packed, mask=(m[:, None] < M) & (q[None, :] < nt)
            )


@functools.cache
def _tables(path: str | None) -> tuple[dict[tuple[int, int, bool], Config], dict[tuple[int, int, bool], Config]]:
    """``TUNED`` and ``TUNED_TALL``, with a sweep's ``table`` and ``tall_table`` from ``path`` over them."""
    tables = (dict(TUNED), dict(TUNED_TALL))
    if path:
        with open(path) as f:
            sweep = json.load(f)
        for table, name in zip(tables, ("table", "tall_table")):
            for key, cfg in sweep.get(name, {}).items():
                n, k, partial = key.split(",")
                table[(int(n), int(k), partial == "True")] = Config(*cfg)
    return tables


def _lookup(n: int, k: int, partial: bool, tall_rows: bool = False) -> Config | None:
    """The table's config of an ``[n, k]`` weight (a partial-sum product may take the whole product's entry)."""
    table = _tables(os.environ.get("SPECGEN_SKINNY_TABLE") or None)[1 if tall_rows else 0]
    tuned = table.get((n, k, partial))
    return table.get((n, k, False)) if tuned is None and partial else tuned


def tall_config(n: int, k: int, partial: bool) -> Config | None:
    """The measured config of an ``[n, k]`` weight at 17 .. ``TALL_ROWS`` rows; None where cuBLAS is as fast
    (a partial-sum product may take the whole product's entry) or ``SPECGEN_SKINNY_TALL=0``."""
    if os.environ.get("SPECGEN_SKINNY_TALL", "1") in ("", "0"):
        return None
    return _lookup(n, k, partial, tall_rows=True)


def heuristic(n: int, k: int, partial: bool) -> Config:
    """The tile for a shape nobody measured: 64-wide tiles, K split (where allowed) for one wave."""
    block_n, block_k = 64, 128
    tiles = -(-n // block_n)
    s = 1
    while partial and tiles * s * 2 <= TARGET_PROGRAMS and k // (s * 2) >= 2 * block_k:
        s *= 2
    return Config(block_n, block_k, s, 4, 3)


def config_for(n: int, k: int, partial: bool, dtype: torch.dtype = torch.bfloat16, rows: int = 1) -> Config:
    """The measured config of an ``[n, k]`` weight (at 17 .. ``TALL_ROWS`` ``rows``: ``tall_config``'s where it
    has one), else ``heuristic``'s; float32 (the tests' dtype) takes the heuristic's tiles with two stages
    (its tiles are twice the bytes)."""
    if dtype == torch.float32:
        return heuristic(n, k, partial)._replace(stages=2)
    if MAX_ROWS < rows <= TALL_ROWS and (tuned := tall_config(n, k, partial)) is not None:
        return tuned
    tuned = _lookup(n, k, partial)
    return tuned if tuned is not None else heuristic(n, k, partial)


def splits_for(n: int, k: int) -> int:
    """K splits of a partial-sum product of an ``[n, k]`` bfloat16 weight."""
    return config_for(n, k, True).splits


def block_rows(m: int) -> int:
    """The M tile of ``m`` rows: 16 up to 16 rows, else the next power of two (one tile holds every row)."""
    return max(16, triton.next_power_of_2(m))


def tall(cfg: Config, block_m: int, elem: int = 2) -> Config:
    """``cfg`` as launched with a ``block_m``-row tile: as it is up to 16 rows.  From 128 rows K steps of at most 64
    (on the H100 at Qwen3-0.6B's head, 128 rows: 131 us against 151 with 128-wide steps; cuBLAS 130); and past 16
    rows no more stages than fit ``SMEM_BYTES`` with one K step's x and w tiles (``elem`` bytes a value) each."""
    if block_m <= 16:
        return cfg
    block_k = min(cfg.block_k, 64) if block_m >= 128 else cfg.block_k
    stages = min(cfg.stages, max(1, SMEM_BYTES // ((block_m + cfg.block_n) * block_k * elem)))
    return cfg._replace(block_k=block_k, stages=stages)


def skinny_gemm(
    x: torch.Tensor,
    w: torch.Tensor,
    partial: bool = False,
    config: Config | None = None,
    out: torch.Tensor | None = None,
    tiles: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x [M, K] @ w [N, K].T``: ``[M, N]`` in ``x``'s dtype, or with ``partial`` possibly float32
    partials ``[splits, M, N]`` (a 2-D result when one split suffices).  ``config`` overrides the tile
    (``tall`` still adapts it past 16 rows).  ``out``: a contiguous ``[M, N]`` tensor of any float dtype that
    takes the float32 sums cast once (a float32 ``out``: the sums themselves), returned (not with ``partial``).
    ``tiles``: a contiguous int64 ``[M, ceil(N / LOGIT_TILE)]`` that takes the result's tiles (not with
    ``partial``; the N tile becomes a multiple of ``LOGIT_TILE``)."""
    m, k = x.shape
    n = w.shape[0]
    if m > MAX_HEAD_ROWS:
        raise ValueError(f"skinny_gemm takes at most {MAX_HEAD_ROWS} rows, not {m}")
    if out is not None and (partial or tuple(out.shape) != (m, n) or not out.is_contiguous()):
        raise ValueError(f"skinny_gemm writes a contiguous [{m}, {n}] out without partial, not {list(out.shape)}")
    nt = -(-n // LOGIT_TILE)
    if tiles is not None and (
        partial or tuple(tiles.shape) != (m, nt) or tiles.dtype != torch.int64 or not tiles.is_contiguous()
    ):
        raise ValueError(
            f"skinny_gemm writes contiguous int64 [{m}, {nt}] tiles without partial, not {list(tiles.shape)}"
        )
    block_m = block_rows(m)
    cfg = tall(config or config_for(n, k, partial, x.dtype, m), block_m, x.element_size())
    if tiles is not None and cfg.block_n % LOGIT_TILE:
        cfg = cfg._replace(block_n=-(-cfg.block_n // LOGIT_TILE) * LOGIT_TILE)
    splits = cfg.splits if partial else 1
    per = -(-k // splits)
    per = -(-per // cfg.block_k) * cfg.block_k
    splits = -(-k // per)  # a split past K would only write zeros
    if out is None:
        out = (
            torch.empty(splits, m, n, dtype=torch.float32, device=x.device)
            if splits > 1
            else torch.empty(m, n, dtype=x.dtype, device=x.device)
        )
    _skinny_gemm_kernel[(-(-n // cfg.block_n), splits)](
        x.contiguous(),
        w,
        out,
        out if tiles is None else tiles,
        m,
        n,
        k,
        per,
        BLOCK_M=block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k,
        PARTIAL=splits > 1,
        IEEE=x.dtype == torch.float32,
        INTERPRET=INTERPRETED,
        TILES=tiles is not None,
        TILE=LOGIT_TILE,
        num_warps=cfg.warps,
        num_stages=cfg.stages,
    )
    return out
