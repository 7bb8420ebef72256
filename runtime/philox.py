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


def _mulhilo(m, x, low: bool = True):
    """``(hi, lo)`` 32-bit words of ``m * x`` for ``m < 2**32`` (an int or an int64 tensor) and ``x`` in ``[0, 2**32)``
    (an int64 tensor or a Python int); ``lo`` is None when ``low`` is false."""
    by_low = m * (x & 0xFFFF)  # m times the low 16 bits of x, < 2**48
    by_high = m * (x >> 16)  # m times the high 16 bits of x, < 2**48
    t = by_low + ((by_high & 0xFFFF) << 16)  # < 2**49; m * x == (by_high >> 16) * 2**32 + t
    return (by_high >> 16) + (t >> 32), (t & MASK32 if low else None)  # hi needs no mask: m * x < 2**64


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


def _lanes_of(x, device) -> torch.Tensor:
    """An integer tensor as int64, or a Python int as a 0-d int64 tensor made on ``device`` by a fill (which a graph
    capture records)."""
    return x.long() if isinstance(x, torch.Tensor) else torch.full((), int(x), dtype=torch.int64, device=device)


def philox_bits(seed, position, stream) -> torch.Tensor:
    """The first 32-bit Philox output word for each broadcast ``(seed, position, stream)``, int64 in ``[0, 2**32)``.

    Python ints join the device of the tensor arguments (the CPU when there are none).

    ``philox4x32`` over ``_words`` of the arguments, bit for bit, in about half the tensor ops (each op is a kernel
    launch on a device): the two words each round multiplies, ``(c0, c2)``, and the keys ``(k0, k1)`` are the two
    lanes of one ``[2, ...]`` tensor, a Python-int stream is mixed in the first round on the host, the whole key
    schedule is built by a few ops up front, and the last round computes only the output word it returns.
    """
    device = next((x.device for x in (position, seed, stream) if isinstance(x, torch.Tensor)), torch.device("cpu"))
    seed, position = _lanes_of(seed, device), _lanes_of(position, device)
    st = stream.long() & MASK32 if isinstance(stream, torch.Tensor) else int(stream) & MASK32
    # the broadcast shape from the tensors' own views (torch.broadcast_shapes would load torch's symbolic shapes,
    # and sympy with them, on its first call)
    shape = torch.broadcast_tensors(seed, position, *([st] if isinstance(st, torch.Tensor) else []))[0].shape
    seed, position = seed.expand(shape), position.expand(shape)
    lane = torch.arange(2, device=device).view(2, *[1] * len(shape))
    key = (seed >> (lane * 32)) & MASK32  # [k0, k1]
    c0, c1 = position & MASK32, (position >> 32) & MASK32
    # round 0 on (c0, c1, c2, c3) = (position words, stream, 0)
    hi0, lo0 = _mulhilo(PHILOX_M0, c0)
    hi1, lo1 = _mulhilo(PHILOX_M1, st)
    x = torch.stack([(hi1 ^ c1).expand(shape), hi0]) ^ key  # (c0, c2) after round 0
    lo1 = lo1.expand(shape) if isinstance(lo1, torch.Tensor) else torch.full_like(lo0, lo1)
    y = torch.stack([lo0, lo1])  # (c3, c1) after round 0: the words (c1, c3) in reverse lane order
    mult = PHILOX_M0 + lane * (PHILOX_M1 - PHILOX_M0)
    bump = (PHILOX_W0 + lane * (PHILOX_W1 - PHILOX_W0))[..., None] * torch.arange(ROUNDS, device=device)
    keys = (key[..., None] + bump) & MASK32  # keys[..., r]: round r's (k0, k1)
    for r in range(1, ROUNDS - 1):
        # c0, c2 = hi(c2) ^ c1 ^ k0, hi(c0) ^ c3 ^ k1 and c1, c3 = lo(c2), lo(c0)
        hi, lo = _mulhilo(mult, x)
        x, y = (hi ^ y).flip(0) ^ keys[..., r], lo
    hi1, _ = _mulhilo(PHILOX_M1, x[1], low=False)
    return hi1 ^ y[1] ^ keys[0, ..., ROUNDS - 1]


def philox_uniform(seed, position, stream) -> torch.Tensor:
    """Uniform float32 in ``[0, 1)`` keyed by ``(seed, position, stream)`` (broadcast integer tensors or ints).

    The top 24 bits of the first output word times ``2**-24``: every value is exact in float32,
    so the same integers give the same float on every device.
    """
    return (philox_bits(seed, position, stream) >> 8).to(torch.float32) * (2.0**-24)
