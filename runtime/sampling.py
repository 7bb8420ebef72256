"""Sampled verification's torch semantics: per-request sampling parameters, filtered target
distributions and speculative rejection sampling, keyed by a counter-based generator.

The ground truth a generated sampled-verification kernel will be tested against
(``docs/kernels.md``, "Sampled verification (semantics)"). Everything here is vectorised torch
over the batch and works on any device; ``reference_rejection_verify`` is the same rule as
plain per-row Python loops, equal to ``rejection_verify`` bit for bit.

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

from .philox import philox_uniform

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


def filtered_probs(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor):
    """``probs[N, V]`` float32: each row's distribution after temperature, top-k and top-p, renormalised.

    * temperature ``t > 0``: ``softmax(logits / t)`` over the tokens kept; ``t == 0``: the one-hot of the
      argmax of the raw logits (lowest index on ties), ``top_k`` and ``top_p`` ignored.
    * top-k (``k > 0``): keep the tokens whose scaled logit is >= the ``k``-th largest, so every token
      tied with the ``k``-th is kept; ``k == 0`` or ``k >= V`` keeps all.
    * top-p (on the top-k distribution): keep token ``x`` iff the mass of the tokens strictly more
      probable than ``x`` is < ``p``: the smallest set of most probable tokens with mass >= ``p``,
      with a tie group at the boundary kept whole; ``p == 1`` keeps every token of positive mass.
    """
    n, v = logits.shape
    x = logits.float()
    t = temperature.to(x.device, torch.float32)
    greedy = t <= 0
    scaled = x / torch.where(greedy, torch.ones_like(t), t)[:, None]
    k = top_k.to(x.device).long()
    k = torch.where((k <= 0) | (k >= v), torch.full_like(k, v), k)
    # one sort: softmax is monotone, so the scaled logits' descending order is the probabilities' too
    sorted_scaled, order = torch.sort(scaled, dim=1, descending=True)
    kth = torch.gather(sorted_scaled, 1, (k - 1)[:, None])
    scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=1)
    desc = torch.gather(probs, 1, order)  # the probabilities in descending order
    mass = torch.cat([torch.zeros_like(desc[:, :1]), torch.cumsum(desc, dim=1)], dim=1)  # mass[i]: top i tokens
    # above[i]: how many tokens are strictly more probable than sorted token i, the first index of its tie group
    i = torch.arange(v, device=x.device).expand(n, v)
    first = torch.cat([torch.ones_like(desc[:, :1], dtype=torch.bool), desc[:, 1:] != desc[:, :-1]], dim=1)
    above = torch.cummax(torch.where(first, i, torch.zeros_like(i)), dim=1).values
    p = top_p.to(x.device, torch.float32)[:, None]
    keep_sorted = (torch.gather(mass, 1, above) < p) | (p >= 1)
    keep = torch.empty_like(keep_sorted).scatter_(1, order, keep_sorted)
    probs = torch.where(keep, probs, torch.zeros_like(probs))
    probs = probs / probs.sum(dim=1, keepdim=True)
    onehot = torch.zeros_like(probs).scatter_(1, torch.argmax(x, dim=1, keepdim=True), 1.0)
    return torch.where(greedy[:, None], onehot, probs)


def _draw(dist: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws from unnormalised float64 rows ``dist[N, V] >= 0`` with uniforms ``u[N]``, int64.

    The token is the first ``i`` with ``cdf[i] > u * cdf[V-1]`` (a sequential float64 prefix sum),
    capped at the last token of positive mass; a row without mass gives token 0.
    """
    cdf = torch.cumsum(dist, dim=1)
    target = u.double() * cdf[:, -1]
    idx = torch.searchsorted(cdf, target[:, None], right=True)[:, 0]
    positive = dist > 0
    last = dist.shape[1] - 1 - torch.argmax(positive.flip(1).int(), dim=1)
    return torch.where(positive.any(dim=1), torch.minimum(idx, last), torch.zeros_like(idx))


def rejection_verify(draft_tokens, draft_probs, draft_dists, target_probs, seeds, positions):
    """Speculative rejection sampling: ``(accepted[B], emitted[B, W])``, both int32.

    ``draft_tokens[B, W-1]`` are the drafts ``x_j``, ``draft_probs[B, W-1]`` their draft probabilities
    ``q_j(x_j)``, ``draft_dists[B, W-1, V]`` the draft distributions ``q_j`` (``None``: each ``q_j`` is
    ``draft_probs[b, j]`` at ``x_j`` and 0 elsewhere, a greedy draft's one-hot), ``target_probs[B, W, V]``
    the filtered target distributions ``p_j``, ``seeds[B]`` the requests' seeds and ``positions[B]``
    the position of each row's verification row 0.

    Draft ``j`` is accepted iff ``u * q_j(x_j) < p_j(x_j)`` (``u``: stream 0 at ``position + j``,
    compared exactly in float64), in order, stopping at the first rejection; ``accepted`` counts the
    accepted drafts. The new token at index ``a = accepted`` is drawn with the uniform of stream 1 at
    ``position + a`` from ``max(0, p_a - q_a)`` after a rejection (from ``p_a`` if that has no mass) or
    from ``p_{W-1}`` when every draft is accepted. ``emitted`` holds the accepted drafts, the new token,
    then -1. A draft token outside ``0..V-1`` has ``p_j(x_j) = 0``: it is rejected unless ``q_j(x_j) = 0``.
    """
    batch, width, vocab = target_probs.shape
    dev = target_probs.device
    x = draft_tokens.to(dev).long()
    valid = (x >= 0) & (x < vocab)
    xs = torch.where(valid, x, torch.zeros_like(x))
    p = target_probs.double()
    p_at = torch.gather(p[:, :-1], 2, xs[..., None])[..., 0]
    p_at = torch.where(valid, p_at, torch.zeros_like(p_at))
    q_at = draft_probs.to(dev).double()
    pos = positions.to(dev).long()
    seed = seeds.to(dev).long()
    j = torch.arange(width - 1, device=dev)
    u_accept = philox_uniform(seed[:, None], pos[:, None] + j, ACCEPT_STREAM).double()
    ok = (u_accept * q_at < p_at).long()
    acc = torch.cumprod(ok, dim=1).sum(dim=1)  # 0..W-1

    rows = torch.arange(batch, device=dev)
    p_new = p[rows, acc]
    qj = acc.clamp(max=width - 2)
    if draft_dists is None:
        q_new = torch.zeros_like(p_new)
        q_new[rows, xs[rows, qj]] = torch.where(valid[rows, qj], q_at[rows, qj], torch.zeros_like(q_at[rows, qj]))
    else:
        q_new = draft_dists.to(dev).double()[rows, qj]
    rejected = acc < width - 1
    residual = torch.where(rejected[:, None], (p_new - q_new).clamp(min=0), p_new)
    empty = ~(residual > 0).any(dim=1)
    residual = torch.where(empty[:, None], p_new, residual)
    token = _draw(residual, philox_uniform(seed, pos + acc, TOKEN_STREAM))

    idx = torch.arange(width, device=dev)[None, :]
    drafts = torch.cat([x, torch.full_like(x[:, :1], -1)], dim=1)
    emitted = torch.where(idx < acc[:, None], drafts, torch.full_like(drafts, -1))
    emitted = torch.where(idx == acc[:, None], token[:, None], emitted)
    return acc.to(torch.int32), emitted.to(torch.int32)


def rejection_inputs(draft_tokens, draft_probs, draft_dists, target_probs, seeds, positions):
    """What the kernel family ``spec_rejection_verify`` reads besides the drafts, their probabilities and
    the temperatures: ``(target_tokens[B, W] int32, target_draft_probs[B, W-1] float32,
    accept_uniforms[B, W-1] float32)``; the arguments are ``rejection_verify``'s.

    The pass over the vocabulary, kept in torch: ``target_draft_probs[b, j]`` is ``p_j(x_j)`` (0 for a
    draft outside the vocabulary), ``accept_uniforms[b, j]`` the uniform of stream 0 at ``position + j``,
    and ``target_tokens[b, j]`` the token the step emits at index ``j`` should it stop there: for
    ``j < W - 1`` a draw from ``max(0, p_j - q_j)`` (``p_j`` if that has no mass), for ``j = W - 1`` the
    bonus from ``p_{W-1}``, each with the uniform of stream 1 at ``position + j``.  Every row's token is
    drawn, not only the one at the accepted count, so that the kernel only selects; since the key of
    the draw at index ``j`` is the one ``rejection_verify`` uses when it stops at ``j``, the kernel's
    outputs on these inputs equal ``rejection_verify``'s (for float32 ``draft_probs``).
    """
    batch, width, vocab = target_probs.shape
    dev = target_probs.device
    x = draft_tokens.to(dev).long()
    valid = (x >= 0) & (x < vocab)
    xs = torch.where(valid, x, torch.zeros_like(x))
    p = target_probs.double()
    p_at = torch.gather(target_probs[:, :-1].float(), 2, xs[..., None])[..., 0]
    p_at = torch.where(valid, p_at, torch.zeros_like(p_at))
    pos = positions.to(dev).long()
    seed = seeds.to(dev).long()
    j = torch.arange(width, device=dev)
    if draft_dists is None:  # a greedy draft: q_j is q_j(x_j) at x_j and 0 elsewhere
        q_at = torch.where(valid, draft_probs.to(dev).double(), torch.zeros_like(p_at, dtype=torch.float64))
        q = torch.zeros_like(p[:, :-1]).scatter_(2, xs[..., None], q_at[..., None])
    else:
        q = draft_dists.to(dev).double()
    residual = (p[:, :-1] - q).clamp(min=0)
    empty = ~(residual > 0).any(dim=2)
    residual = torch.where(empty[..., None], p[:, :-1], residual)
    dist = torch.cat([residual, p[:, -1:]], dim=1)
    # both streams in one call (stream s at index s): ``[B, 2, W]``
    u = philox_uniform(seed[:, None, None], pos[:, None, None] + j, torch.arange(2, device=dev)[:, None])
    u_accept, u_token = u[:, ACCEPT_STREAM, :-1], u[:, TOKEN_STREAM]
    tokens = _draw(dist.reshape(batch * width, vocab), u_token.reshape(-1)).reshape(batch, width)
    return tokens.to(torch.int32), p_at.float(), u_accept.float()


def row_params(bufs, width: int):
    """A step's per-row ``(temperature, top_k, top_p)`` repeated for each of its ``W`` verify rows, ``[B * W]``."""
    return tuple(bufs[n][:, None].expand(-1, width).reshape(-1) for n in ("temperature", "top_k", "top_p"))


def target_probs_of(bufs, logits: torch.Tensor) -> torch.Tensor:
    """``p_j``: the filtered target distributions ``[B, W, V]`` of a step's verify rows from their logits
    (``logits[B * W, V]``, rows past them ignored) and the step buffers' sampling parameters."""
    batch, width = bufs["target_tokens"].shape
    rows = logits[: batch * width]
    return filtered_probs(rows, *row_params(bufs, width)).view(batch, width, -1)


def sample_rows(bufs, logits: torch.Tensor, draft_dists: torch.Tensor | None = None) -> None:
    """The vocabulary pass of a sampling verify step over its step buffers (the plans' ``sample_rows``, between
    the target forward and ``spec_rejection_verify``): ``rejection_inputs`` of the step's drafts, their
    ``draft_probs`` and ``draft_dists`` (``[B, W-1, V]`` or None: one-hot drafts), the filtered target
    distributions of ``logits`` and the rows' seeds at positions ``seq_lens``, written into ``target_tokens``,
    ``target_draft_probs`` and ``accept_uniforms``.  Torch ops only, so a captured graph records it.
    """
    batch = bufs["target_tokens"].shape[0]
    dists = None if draft_dists is None else draft_dists[:batch]
    probs = target_probs_of(bufs, logits)
    out = rejection_inputs(bufs["draft_tokens"], bufs["draft_probs"], dists, probs, bufs["seed"], bufs["seq_lens"])
    for name, t in zip(("target_tokens", "target_draft_probs", "accept_uniforms"), out):
        bufs[name].copy_(t)


def sample_tokens(logits: torch.Tensor, bufs, positions: torch.Tensor, stream: int):
    """One token per row drawn from the row's filtered distribution of ``logits[B, V]`` under the step buffers'
    sampling parameters (rows ``:B``), with the uniform of ``stream`` at ``positions[b]``: ``(tokens[B] int64,
    q[B, V] float32)``.  A greedy row (temperature 0) gives the argmax of ``logits`` (lowest index on ties)."""
    batch = logits.shape[0]
    q = filtered_probs(logits, *(bufs[n][:batch] for n in ("temperature", "top_k", "top_p")))
    return _draw(q.double(), philox_uniform(bufs["seed"][:batch], positions, stream)), q


def draft_sample(logits: torch.Tensor, bufs, positions: torch.Tensor):
    """A sampling draft's token for each row: ``(tokens[B] int64, q(x)[B] float32, q[B, V] float32)``.

    ``q`` is the row's own filtered distribution of ``logits[B, V]`` (``sample_tokens``); the token is its draw
    with the uniform of stream 2 at the drafted token's ``positions[b]``.  A greedy row (temperature 0) drafts
    the argmax of ``logits`` with ``q(x) = 1``.
    """
    x, q = sample_tokens(logits, bufs, positions, DRAFT_STREAM)
    return x, q.gather(1, x[:, None])[:, 0], q


def first_tokens(logits: torch.Tensor, bufs, prompt_lens: torch.Tensor) -> torch.Tensor:
    """The token after each prompt (position ``P``) from the prefill's last row ``logits[B, V]``: a draw with the
    uniform of stream 1 at ``P - 1`` (the key the rule gives a token predicted by the row at ``P - 1``; the
    verify steps' keys start at ``P``), the argmax on a greedy row."""
    return sample_tokens(logits, bufs, prompt_lens.long() - 1, TOKEN_STREAM)[0]


def reference_rejection_verify(draft_tokens, draft_probs, draft_dists, target_probs, seeds, positions):
    """``rejection_verify`` as plain per-row Python loops over the same keyed uniforms (float64 arithmetic)."""
    batch, width, vocab = target_probs.shape
    p_all, q_all = target_probs.double().tolist(), draft_probs.double().tolist()
    dists = None if draft_dists is None else draft_dists.double().tolist()
    xs_all, seeds_l, pos_l = draft_tokens.tolist(), seeds.tolist(), positions.tolist()
    accepted, emitted = [], []
    for b in range(batch):
        xs, seed, pos = xs_all[b], seeds_l[b], pos_l[b]
        a = 0
        while a < width - 1:
            x = xs[a]
            p_x = p_all[b][a][x] if 0 <= x < vocab else 0.0
            u = float(philox_uniform(seed, pos + a, ACCEPT_STREAM))
            if not u * q_all[b][a] < p_x:
                break
            a += 1
        p = p_all[b][a]
        if a < width - 1:
            if dists is not None:
                q = dists[b][a]
            else:
                q = [0.0] * vocab
                if 0 <= xs[a] < vocab:
                    q[xs[a]] = q_all[b][a]
            dist = [max(pi - qi, 0.0) for pi, qi in zip(p, q)]
            if not any(w > 0 for w in dist):
                dist = p
        else:
            dist = p
        u = float(philox_uniform(seed, pos + a, TOKEN_STREAM))
        cdf, total = [], 0.0
        for w in dist:
            total += w
            cdf.append(total)
        target = u * total
        token = next((i for i, c in enumerate(cdf) if c > target), vocab)
        positive = [i for i, w in enumerate(dist) if w > 0]
        token = min(token, positive[-1]) if positive else 0
        accepted.append(a)
        emitted.append(xs[:a] + [token] + [-1] * (width - 1 - a))
    return torch.tensor(accepted, dtype=torch.int32), torch.tensor(emitted, dtype=torch.int32).reshape(batch, width)
