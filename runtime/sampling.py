"""Sampled verification's torch semantics: per-request sampling parameters, filtered target
distributions and speculative rejection sampling, keyed by a counter-based generator.

The ground truth the generated families are tested against (``docs/kernels.md``, "Sampled
verification (semantics)" and "The vocabulary pass"). Everything here is vectorised torch over the
batch and works on any device. A row's filtered distribution is integer weights (``Filtered``),
so every sum and every draw is exact and a kernel that adds in another order gets the same bits;
``tests/oracles/sampled_reference.py`` holds the rule as plain per-row Python loops.

Random keys (``philox_uniform(seed, position, stream)``, ``runtime/philox.py``) for a row whose
verification row 0 sits at position ``P``:

* stream 0 at ``P + j`` (``j`` in ``0..W-2``): the uniform ``u`` that accepts or rejects draft ``j``;
* stream 1 at ``P + k``: the uniform that draws the one new token emitted at index ``k``
  (``k = accepted``), from the residual after a rejection or from ``p_{W-1}`` when all are accepted.

``rejection_inputs`` splits the rule for the generated family ``spec_rejection_verify``
(``runtime/semantics.py``): this pass over the vocabulary draws every row's token and gathers
``p_j(x_j)`` and the acceptance uniforms; the kernel compares and selects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .philox import philox_bits, philox_uniform

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# stream 2 keys a sampling draft's own draws (``draft_sample``): the token it drafts for position ``P``
ACCEPT_STREAM, TOKEN_STREAM, DRAFT_STREAM = 0, 1, 2
SAMPLE_ROWS = "sample_rows"  # the plans' name of the vocabulary pass (``sample_rows``)


@dataclass(frozen=True)
class SamplingParams:
    """One request's sampling parameters.

    ``temperature`` 0 is greedy (``top_k`` and ``top_p`` are then ignored); ``top_k`` 0 keeps
    every token; ``top_p`` 1.0 keeps every token; ``seed`` keys the request's random decisions.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        t, k, p, s = self.temperature, self.top_k, self.top_p, self.seed
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got {t!r}")
        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 2**31 - 1:
            raise ValueError(f"top_k must be an int in 0..2**31-1 (0 keeps every token), got {k!r}")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise ValueError(f"top_p must be a number in (0, 1] (1.0 keeps every token), got {p!r}")
        if isinstance(s, bool) or not isinstance(s, int) or not INT64_MIN <= s <= INT64_MAX:
            raise ValueError(f"seed must be an int that fits int64, got {s!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class SamplingTensors:
    """A batch's sampling parameters as persistent tensors: ``temperature[B]`` float32, ``top_k[B]`` int32,
    ``top_p[B]`` float32, ``seed[B]`` int64.

    ``fill`` rewrites them in place, so a graph captured over these tensors needs no recapture when
    the parameters change; rows past the given requests are greedy with seed 0.
    """

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    seed: torch.Tensor

    @classmethod
    def empty(cls, batch: int, device="cpu") -> SamplingTensors:
        """``batch`` greedy rows."""
        out = cls(
            torch.zeros(batch, dtype=torch.float32, device=device),
            torch.zeros(batch, dtype=torch.int32, device=device),
            torch.ones(batch, dtype=torch.float32, device=device),
            torch.zeros(batch, dtype=torch.int64, device=device),
        )
        return out

    @classmethod
    def of(cls, params, device="cpu") -> SamplingTensors:
        """New tensors holding ``params`` (a sequence of ``SamplingParams``)."""
        return cls.empty(len(params), device).fill(params)

    def fill(self, params) -> SamplingTensors:
        """Write ``params`` into rows ``0..len(params)-1`` in place and reset the rest to greedy; returns self."""
        batch = self.temperature.shape[0]
        if len(params) > batch:
            raise ValueError(f"{len(params)} requests do not fit {batch} sampling rows")
        pad = batch - len(params)
        cols = (
            (self.temperature, [p.temperature for p in params] + [0.0] * pad),
            (self.top_k, [p.top_k for p in params] + [0] * pad),
            (self.top_p, [p.top_p for p in params] + [1.0] * pad),
            (self.seed, [p.seed for p in params] + [0] * pad),
        )
        for dst, values in cols:
            dst.copy_(torch.tensor(values, dtype=dst.dtype))
        return self


FIXED_BITS = 40  # a kept token's weight: floor(e * 2**40) for its e in [0, 1]
MAX_VOCAB = 2**22  # every weight total (at most V * 2**40) and every draw's arithmetic fits int64


@dataclass
class Filtered:
    """Rows' filtered distributions as integer weights: ``weights[..., V]`` int64 >= 0 and ``totals[...]``
    int64, their sum. Every sum over a row is an integer sum, so any order gives the same bits."""

    weights: torch.Tensor
    totals: torch.Tensor

    @property
    def probs(self) -> torch.Tensor:
        """``p``: float32 ``weight / total`` (rounded from float64), 0 on a row without mass."""
        return probs_of(self.weights, self.totals)

    def __getitem__(self, index) -> "Filtered":
        return Filtered(self.weights[index], self.totals[index])

    def view(self, *shape) -> "Filtered":
        return Filtered(self.weights.view(*shape, -1), self.totals.view(*shape))


def probs_of(weights: torch.Tensor, totals: torch.Tensor) -> torch.Tensor:
    """float32 ``weights / totals`` (the quotient of the two int64 values as float64, rounded once to float32),
    0 where the total is 0."""
    tot = totals[..., None]
    p = (weights.double() / torch.where(tot > 0, tot, torch.ones_like(tot)).double()).float()
    return torch.where(tot > 0, p, torch.zeros_like(p))


def row_weights(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> Filtered:
    """Each row's filtered distribution as integer weights (``Filtered``), from ``logits[N, V]``.

    * temperature ``t <= 0``: weight 1 at the argmax of the raw logits (a NaN counts as the largest, the
      lowest index on ties), 0 elsewhere; ``top_k`` and ``top_p`` are ignored.
    * otherwise ``s = float32(logit) / t``; NaN scaled logits have weight 0 and count for nothing below.
      ``m`` is the largest ``s``. Top-k (``0 < k <`` the number of non-NaN ``s``) keeps the tokens whose
      ``s`` is >= the ``k``-th largest (ties with it all kept). A kept token's ``e`` is 1 where ``s == m``
      and ``exp(s - m)`` elsewhere (float32 ``expf`` on CUDA; in float64, rounded once, on the CPU), its
      weight ``E = floor(e * 2**40)``; ``Z``
      is the sum of the ``E``.
    * top-p (``p < 1``; a NaN ``p`` keeps nothing): token ``x`` stays iff ``E_x > 0`` and
      ``float64(S_x) < float64(p) * float64(Z)``, ``S_x`` the sum of the weights strictly above ``E_x``:
      the smallest set of heaviest tokens whose mass reaches ``p``, a tie group at the boundary kept whole.
    """
    n, v = logits.shape
    if v > MAX_VOCAB:
        raise ValueError(f"a vocabulary of {v} tokens is more than the {MAX_VOCAB} the integer weights admit")
    x = logits.float()
    t = temperature.to(x.device, torch.float32)
    greedy = t <= 0
    s = x / torch.where(greedy, torch.ones_like(t), t)[:, None]
    valid = ~torch.isnan(s)
    neg = torch.full_like(s, float("-inf"))
    sv = torch.where(valid, s, neg)
    m = sv.amax(dim=1, keepdim=True)
    k = top_k.to(x.device).long()
    nvalid = valid.sum(dim=1)
    ranked = torch.sort(sv, dim=1, descending=True).values
    kth = torch.gather(ranked, 1, (k.clamp(min=1, max=v) - 1)[:, None])
    topk = ((k > 0) & (k < nvalid))[:, None]
    kept = valid & (~topk | (s >= kth))
    # CUDA: float32 exp (CUDA's expf, as the kernels call it); CPU: exp in float64 rounded once (the CPU's float32
    # exp implementations differ in the last bit, float64's rounded to float32 agree but for ~2**-29 of inputs)
    e = torch.exp(s - m) if x.is_cuda else torch.exp(s.double() - m.double()).float()
    e = torch.where(s == m, torch.ones_like(e), e)
    big = torch.floor(e.double() * 2.0**FIXED_BITS).long()
    big = torch.where(kept, big, torch.zeros_like(big))
    z = big.sum(dim=1)
    p = top_p.to(x.device, torch.float64)
    heavy = torch.sort(big, dim=1, descending=True).values
    # above[i]: the mass strictly heavier than sorted weight i (the mass before its tie group)
    before = torch.cumsum(heavy, dim=1) - heavy
    first = torch.cat([torch.ones_like(heavy[:, :1], dtype=torch.bool), heavy[:, 1:] != heavy[:, :-1]], dim=1)
    i = torch.arange(v, device=x.device).expand(n, v)
    above = torch.gather(before, 1, torch.cummax(torch.where(first, i, torch.zeros_like(i)), dim=1).values)
    stays = (heavy > 0) & (above.double() < (p * z.double())[:, None])
    # the stayers are a prefix of the sorted weights: the lightest one is the cut
    last = (stays.sum(dim=1) - 1).clamp(min=0)
    cut = torch.where(stays.any(dim=1), torch.gather(heavy, 1, last[:, None])[:, 0], torch.full_like(z, 2**62))
    cut = torch.where(p >= 1, torch.ones_like(cut), cut)
    w = torch.where(big >= cut[:, None], big, torch.zeros_like(big))
    onehot = torch.zeros_like(w).scatter_(1, torch.argmax(x, dim=1, keepdim=True), 1)
    w = torch.where(greedy[:, None], onehot, w)
    return Filtered(w, w.sum(dim=1))


def filtered_probs(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor):
    """``probs[N, V]`` float32: ``row_weights(...).probs``, each row's distribution after temperature, top-k
    and top-p (a temperature-0 row is the one-hot of its argmax)."""
    return row_weights(logits, temperature, top_k, top_p).probs


def draw(weights: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws from integer weights ``[N, V] >= 0`` with Philox words ``bits[N]`` (``philox_bits``),
    int64: with ``U = bits >> 8`` (24 bits) and ``T`` the row's total, the first token whose running sum
    exceeds ``floor(U * T / 2**24)``; token 0 on a row without mass. Exact integer arithmetic (the product is
    split so that it fits int64), so any summation order gives the same token."""
    u = bits.long() >> 8
    total = weights.sum(dim=1)
    target = u * (total >> 24) + ((u * (total & 0xFFFFFF)) >> 24)
    idx = (torch.cumsum(weights, dim=1) <= target[:, None]).sum(dim=1)
    return torch.where(total > 0, idx, torch.zeros_like(idx))


def residual_weights(w: torch.Tensor, totals: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``max(0, p - q)`` in the weights' units: ``max(0, W_i - Q_i)`` with ``Q_i = floor(min(q_i * Z, Z))``
    (float64, ``Z`` the row's total; 0 where ``q_i`` is not > 0), or ``w`` itself where that has no mass."""
    zt = totals.double()[..., None]
    qq = torch.where(q > 0, torch.minimum(torch.floor(q.double() * zt), zt), torch.zeros_like(zt))
    d = (w - qq.long()).clamp(min=0)
    return torch.where((d.sum(dim=-1) > 0)[..., None], d, w)


def rejection_verify(draft_tokens, draft_probs, draft_dists, target: Filtered, seeds, positions):
    """Speculative rejection sampling: ``(accepted[B], emitted[B, W])``, both int32.

    ``draft_tokens[B, W-1]`` are the drafts ``x_j``, ``draft_probs[B, W-1]`` their draft probabilities
    ``q_j(x_j)``, ``draft_dists[B, W-1, V]`` the draft distributions ``q_j`` (``None``: each ``q_j`` is
    ``draft_probs[b, j]`` at ``x_j`` and 0 elsewhere, a greedy draft's one-hot), ``target`` the filtered
    target distributions ``p_j`` as weights ``[B, W, V]`` (``row_weights``), ``seeds[B]`` the requests' seeds
    and ``positions[B]`` the position of each row's verification row 0.

    Draft ``j`` is accepted iff ``u * q_j(x_j) < p_j(x_j)`` (``u``: stream 0 at ``position + j``, ``p`` the
    float32 ``probs_of``, compared exactly in float64), in order, stopping at the first rejection;
    ``accepted`` counts the accepted drafts. The new token at index ``a = accepted`` is drawn (``draw``,
    stream 1 at ``position + a``) from ``residual_weights`` of ``p_a`` and ``q_a`` after a rejection or from
    ``p_{W-1}`` when every draft is accepted. ``emitted`` holds the accepted drafts, the new token, then -1.
    A draft token outside ``0..V-1`` has ``p_j(x_j) = 0``: it is rejected unless ``q_j(x_j) = 0``.
    """
    batch, width, vocab = target.weights.shape
    dev = target.weights.device
    x = draft_tokens.to(dev).long()
    valid = (x >= 0) & (x < vocab)
    xs = torch.where(valid, x, torch.zeros_like(x))
    p = target.probs.double()
    p_at = torch.gather(p[:, :-1], 2, xs[..., None])[..., 0]
    p_at = torch.where(valid, p_at, torch.zeros_like(p_at))
    q_at = draft_probs.to(dev).double()
    pos = positions.to(dev).long()
    seed = seeds.to(dev).long()
    j = torch.arange(width - 1, device=dev)
    u_accept = philox_uniform(seed[:, None], pos[:, None] + j, ACCEPT_STREAM).double()
    ok = (u_accept * q_at < p_at).long()
    acc = torch.cumsum(ok, dim=1).eq(torch.arange(1, width, device=dev)).sum(dim=1)  # leading accepts

    rows = torch.arange(batch, device=dev)
    w_new, z_new = target.weights[rows, acc], target.totals[rows, acc]
    qj = acc.clamp(max=width - 2)
    if draft_dists is None:
        q_new = torch.zeros_like(w_new, dtype=torch.float32)
        q_new[rows, xs[rows, qj]] = torch.where(
            valid[rows, qj], draft_probs.to(dev).float()[rows, qj], torch.zeros_like(q_new[:, 0])
        )
    else:
        q_new = draft_dists.to(dev).float()[rows, qj]
    rejected = acc < width - 1
    dist = torch.where(rejected[:, None], residual_weights(w_new, z_new, q_new), w_new)
    token = draw(dist, philox_bits(seed, pos + acc, TOKEN_STREAM))

    idx = torch.arange(width, device=dev)[None, :]
    drafts = torch.cat([x, torch.full_like(x[:, :1], -1)], dim=1)
    emitted = torch.where(idx < acc[:, None], drafts, torch.full_like(drafts, -1))
    emitted = torch.where(idx == acc[:, None], token[:, None], emitted)
    return acc.to(torch.int32), emitted.to(torch.int32)


def rejection_inputs(draft_tokens, draft_probs, draft_dists, target: Filtered, seeds, positions):
    """What the kernel family ``spec_rejection_verify`` reads besides the drafts, their probabilities and
    the temperatures: ``(target_tokens[B, W] int32, target_draft_probs[B, W-1] float32,
    accept_uniforms[B, W-1] float32)``; the arguments are ``rejection_verify``'s.

    The pass over the vocabulary (the generated families ``spec_target_sample`` and
    ``spec_target_sample_dense`` compute the same bits): ``target_draft_probs[b, j]`` is ``p_j(x_j)`` (0 for a
    draft outside the vocabulary), ``accept_uniforms[b, j]`` the uniform of stream 0 at ``position + j``, and
    ``target_tokens[b, j]`` the token the step emits at index ``j`` should it stop there: for ``j < W - 1`` a
    draw from ``residual_weights`` of ``p_j`` and ``q_j``, for ``j = W - 1`` the bonus from ``p_{W-1}``, each
    with stream 1 at ``position + j``. Every row's token is drawn, not only the one at the accepted count:
    the key of the draw at index ``j`` is the one ``rejection_verify`` uses when it stops at ``j``, so the
    kernel's outputs on these inputs equal ``rejection_verify``'s.
    """
    batch, width, vocab = target.weights.shape
    dev = target.weights.device
    x = draft_tokens.to(dev).long()
    valid = (x >= 0) & (x < vocab)
    xs = torch.where(valid, x, torch.zeros_like(x))
    probs = target.probs
    p_at = torch.gather(probs[:, :-1], 2, xs[..., None])[..., 0]
    p_at = torch.where(valid, p_at, torch.zeros_like(p_at))
    pos = positions.to(dev).long()
    seed = seeds.to(dev).long()
    j = torch.arange(width, device=dev)
    if draft_dists is None:  # a greedy draft: q_j is q_j(x_j) at x_j and 0 elsewhere
        q_at = torch.where(valid, draft_probs.to(dev).float(), torch.zeros_like(p_at))
        q = torch.zeros_like(probs[:, :-1]).scatter_(2, xs[..., None], q_at[..., None])
    else:
        q = draft_dists.to(dev).float()
    dist = torch.cat([residual_weights(target.weights[:, :-1], target.totals[:, :-1], q), target.weights[:, -1:]], 1)
    # both streams in one call (stream s at index s): ``[B, 2, W]``
    bits = philox_bits(seed[:, None, None], pos[:, None, None] + j, torch.arange(2, device=dev)[:, None])
    u_accept = ((bits[:, ACCEPT_STREAM, :-1] >> 8).float() * 2.0**-24).float()
    tokens = draw(dist.reshape(batch * width, vocab), bits[:, TOKEN_STREAM].reshape(-1)).reshape(batch, width)
    return tokens.to(torch.int32), p_at.float(), u_accept


def row_params(bufs, width: int):
    """A step's per-row ``(temperature, top_k, top_p)`` repeated for each of its ``W`` verify rows, ``[B * W]``."""
    return tuple(bufs[n][:, None].expand(-1, width).reshape(-1) for n in ("temperature", "top_k", "top_p"))


def target_weights_of(bufs, logits: torch.Tensor) -> Filtered:
    """``p_j``: the filtered target distributions ``[B, W, V]`` (as ``Filtered`` weights) of a step's verify rows
    from their logits (``logits[B * W, V]``, rows past them ignored) and the step buffers' sampling parameters."""
    batch, width = bufs["target_tokens"].shape
    rows = logits[: batch * width]
    return row_weights(rows, *row_params(bufs, width)).view(batch, width)


def sample_rows(bufs, logits: torch.Tensor, draft_dists: torch.Tensor | None = None) -> None:
    """The vocabulary pass of a sampling verify step over its step buffers (the plans' ``sample_rows``, between
    the target forward and ``spec_rejection_verify``): ``rejection_inputs`` of the step's drafts, their
    ``draft_probs`` and ``draft_dists`` (``[B, W-1, V]`` or None: one-hot drafts), the filtered target
    distributions of ``logits`` and the rows' seeds at positions ``seq_lens``, written into ``target_tokens``,
    ``target_draft_probs`` and ``accept_uniforms``.  Torch ops only, so a captured graph records it.
    """
    batch = bufs["target_tokens"].shape[0]
    dists = None if draft_dists is None else draft_dists[:batch]
    target = target_weights_of(bufs, logits)
    out = rejection_inputs(bufs["draft_tokens"], bufs["draft_probs"], dists, target, bufs["seed"], bufs["seq_lens"])
    for name, t in zip(("target_tokens", "target_draft_probs", "accept_uniforms"), out):
        bufs[name].copy_(t)


def sample_tokens(logits: torch.Tensor, bufs, positions: torch.Tensor, stream: int):
    """One token per row drawn from the row's filtered distribution of ``logits[B, V]`` under the step buffers'
    sampling parameters (rows ``:B``), with the Philox word of ``stream`` at ``positions[b]``: ``(tokens[B] int64,
    q[B, V] float32)``.  A greedy row (temperature 0) gives the argmax of ``logits`` (lowest index on ties)."""
    batch = logits.shape[0]
    f = row_weights(logits, *(bufs[n][:batch] for n in ("temperature", "top_k", "top_p")))
    return draw(f.weights, philox_bits(bufs["seed"][:batch], positions, stream)), f.probs


def draft_sample(logits: torch.Tensor, bufs, positions: torch.Tensor):
    """A sampling draft's token for each row: ``(tokens[B] int64, q(x)[B] float32, q[B, V] float32)``.

    ``q`` is the row's own filtered distribution of ``logits[B, V]`` (``sample_tokens``); the token is its draw
    with stream 2 at the drafted token's ``positions[b]``.  A greedy row (temperature 0) drafts the argmax of
    ``logits`` with ``q(x) = 1``. The generated family ``spec_draft_sample`` computes the same bits.
    """
    x, q = sample_tokens(logits, bufs, positions, DRAFT_STREAM)
    return x, q.gather(1, x[:, None])[:, 0], q


def first_tokens(logits: torch.Tensor, bufs, prompt_lens: torch.Tensor) -> torch.Tensor:
    """The token after each prompt (position ``P``) from the prefill's last row ``logits[B, V]``: a draw with
    stream 1 at ``P - 1`` (the key the rule gives a token predicted by the row at ``P - 1``; the verify steps'
    keys start at ``P``), the argmax on a greedy row."""
    return sample_tokens(logits, bufs, prompt_lens.long() - 1, TOKEN_STREAM)[0]
