"""A counter-based random generator: Philox-4x32-10, written with torch integer ops.

``philox_uniform(seed, position, stream)`` is a pure function of three integers per element:
no generator object, no state, no dependence on the device, the batch or the order of the
calls. Sampled verification (``runtime/sampling.py``) keys every random decision by
(request seed, token position, stream) with it, so a captured graph replays bit-identical
decisions and a kernel on any device can reproduce them from the same integers.

Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) is
the generator of cuRAND's ``curand_init``/Philox, of torch's CUDA RNG and of JAX; with its
10 rounds it passes TestU01's BigCrush on any counter/key sequence, including the
consecutive counters used here, which is far more than the few uniforms per token that
sampling draws. The mapping used here:

    counter = (position mod 2**32, position >> 32 mod 2**32, stream mod 2**32, 0)
    key     = (seed mod 2**32, seed >> 32 mod 2**32)           (seed as 64-bit two's complement)
    uniform = (first output word >> 8) * 2**-24                 float32 in [0, 1), exact

The 32x32 -> 64-bit products are split into 16-bit halves so every intermediate fits a
signed int64: nothing relies on integer overflow, and the result is identical on CPU and GPU.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10


def _mulhilo(m: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hi, lo)`` 32-bit words of ``m * x`` for a constant ``m < 2**32`` and int64 ``x`` in ``[0, 2**32)``."""
    low = m * (x & 0xFFFF)  # < 2**48
    high = m * (x >> 16)  # < 2**48
    t = low + ((high & 0xFFFF) << 16)  # < 2**49
    return ((high >> 16) + (t >> 32)) & MASK32, t & MASK32


def philox4x32(counter: tuple[torch.Tensor, ...], key: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Philox-4x32-10 over broadcastable int64 words in ``[0, 2**32)``: the four output words, int64."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + PHILOX_W0) & MASK32, (k1 + PHILOX_W1) & MASK32
        hi0, lo0 = _mulhilo(PHILOX_M0, c0)
        hi1, lo1 = _mulhilo(PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def _words(x, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The low and high 32-bit words of an integer tensor (or a Python int, made on ``device`` by a fill, which a
    graph capture records) read as 64-bit two's complement, int64."""
    x = x.long() if isinstance(x, torch.Tensor) else torch.full((), int(x), dtype=torch.int64, device=device)
    return x & MASK32, (x >> 32) & MASK32


def philox_bits(seed, position, stream) -> torch.Tensor:
    """The first 32-bit Philox output word for each broadcast ``(seed, position, stream)``, int64 in ``[0, 2**32)``.

    Python ints join the device of the tensor arguments (the CPU when there are none)."""
    device = next((x.device for x in (position, seed, stream) if isinstance(x, torch.Tensor)), torch.device("cpu"))
    s_lo, s_hi = _words(seed, device)
    p_lo, p_hi = _words(position, device)
    st, _ = _words(stream, device)
    p_lo, p_hi, st, s_lo, s_hi = torch.broadcast_tensors(p_lo, p_hi, st, s_lo, s_hi)
    return philox4x32((p_lo, p_hi, st, torch.zeros_like(st)), (s_lo, s_hi))[0]


def philox_uniform(seed, position, stream) -> torch.Tensor:
    """Uniform float32 in ``[0, 1)`` keyed by ``(seed, position, stream)`` (broadcast integer tensors or ints).

    The top 24 bits of the first output word times ``2**-24``: every value is exact in float32,
    so the same integers give the same float on every device.
    """
    return (philox_bits(seed, position, stream) >> 8).to(torch.float32) * (2.0**-24)
