"""Sampled verification as plain host loops: the rule per row (``reference_rejection_verify``) and a host loop of
sampled speculative decoding (``sampled_speculative_generate``), the tokens every engine mode must emit for a fixed
seed.

It shares no code with the engine's sampling path besides ``row_weights`` (a row's filtered distribution as integer
weights) and the keyed Philox words. The rule is ``reference_rejection_verify``: per-row Python loops, Python
integers for the weights, the residual and the draw, float64 for the acceptance. The host loop runs the target's
verify forward of ``W`` rows per step (token ``t_0`` then the drafts, at positions ``S .. S + W - 1``), takes its
drafts from an ``AcceptanceMix`` (deterministic, so each is the one-hot case ``q(x) = 1``) and appends the committed
tokens on the host. The token after the prompt is drawn from the prefill's last row with the word of stream 1 at
``P - 1``.
"""

from __future__ import annotations

import math
import struct

import torch

from specgen.engine.acceptance import AcceptanceMix
from specgen.models.paged_kv import BlockAllocator, make_block_table, slot
from specgen.runtime.philox import philox_bits, philox_uniform
from specgen.runtime.sampling import ACCEPT_STREAM, TOKEN_STREAM, Filtered, row_weights

__all__ = ["reference_rejection_verify", "sampled_speculative_generate"]


def _f32(x: float) -> float:
    """``x`` rounded to float32 (to nearest, ties to even), as a Python float."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _draw(weights: list[int], bits: int) -> int:
    """Inverse CDF over integer weights with a Philox word: with ``U = bits >> 8`` and ``T`` the total, the first
    token whose running sum exceeds ``floor(U * T / 2**24)``; token 0 when there is no mass."""
    total = sum(weights)
    target = (bits >> 8) * total >> 24
    run = 0
    for token, w in enumerate(weights):
        run += w
        if run > target:
            return token
    return 0


def reference_rejection_verify(draft_tokens, draft_probs, draft_dists, target: Filtered, seeds, positions):
    """``rejection_verify`` as plain per-row Python loops over the same keyed Philox words (Python integers for
    the weights, float64 for the acceptance)."""
    batch, width, vocab = target.weights.shape
    w_all, z_all = target.weights.tolist(), target.totals.tolist()
    q_all = draft_probs.double().tolist()
    dists = None if draft_dists is None else draft_dists.float().double().tolist()
    xs_all, seeds_l, pos_l = draft_tokens.tolist(), seeds.tolist(), positions.tolist()
    accepted, emitted = [], []
    for b in range(batch):
        xs, seed, pos = xs_all[b], seeds_l[b], pos_l[b]
        a = 0
        while a < width - 1:
            x, z = xs[a], z_all[b][a]
            p_x = _f32(w_all[b][a][x] / float(z)) if 0 <= x < vocab and z > 0 else 0.0
            u = float(philox_uniform(seed, pos + a, ACCEPT_STREAM))
            if not u * _f32(q_all[b][a]) < p_x:
                break
            a += 1
        w, z = w_all[b][a], z_all[b][a]
        dist = w
        if a < width - 1:
            if dists is not None:
                q = dists[b][a]
            else:
                q = [0.0] * vocab
                if 0 <= xs[a] < vocab:
                    q[xs[a]] = _f32(q_all[b][a])
            big = [int(min(math.floor(qi * float(z)), float(z))) if qi > 0 else 0 for qi in q]
            res = [max(wi - qi, 0) for wi, qi in zip(w, big)]
            dist = res if any(res) else w
        token = _draw(dist, int(philox_bits(seed, pos + a, TOKEN_STREAM)))
        accepted.append(a)
        emitted.append(xs[:a] + [token] + [-1] * (width - 1 - a))
    return torch.tensor(accepted, dtype=torch.int32), torch.tensor(emitted, dtype=torch.int32).reshape(batch, width)


@torch.inference_mode()
def sampled_speculative_generate(model, mix: AcceptanceMix, prompts, params, max_new_tokens: int, width: int):
    """Each prompt's first ``max_new_tokens`` tokens under its ``SamplingParams`` (``params``, one per prompt)."""
    dev = model.embed_tokens.weight.device
    bs = 16
    lens = [len(p) for p in prompts]
    blocks = -(-(max(lens) + max_new_tokens + 2 * width + 1) // bs)
    table = make_block_table(BlockAllocator(len(prompts) * blocks, 0), len(prompts), blocks, dev)
    model.allocate_kv_cache(len(prompts) * blocks, bs)
    temp = torch.tensor([p.temperature for p in params])
    top_k, top_p = torch.tensor([p.top_k for p in params]), torch.tensor([p.top_p for p in params])
    seeds = torch.tensor([p.seed for p in params])
    r = max(lens)
    toks = torch.tensor([p + [0] * (r - len(p)) for p in prompts], device=dev)
    idx = torch.arange(r, device=dev)
    pos = idx.expand(len(prompts), r)
    plens = torch.tensor(lens, device=dev)
    slots = torch.where(idx < plens[:, None], slot(table, pos, bs), torch.full_like(pos, -1))
    qsl = torch.arange(len(prompts) + 1, device=dev) * r
    _, logits = model(toks.reshape(-1), pos.reshape(-1), slots.reshape(-1), table, plens, qsl, r)
    last = torch.arange(len(prompts), device=dev) * r + plens - 1
    first = row_weights(logits[last].float().cpu(), temp, top_k, top_p).weights.tolist()
    out = [[_draw(w, int(philox_bits(p.seed, n - 1, TOKEN_STREAM)))] for w, p, n in zip(first, params, lens)]
    seq = list(lens)  # KV written: every committed token but the newest
    qsl = torch.arange(len(prompts) + 1, device=dev) * width
    while min(len(o) for o in out) < max_new_tokens:
        generated = torch.tensor([len(o) - 1 for o in out], device=dev)
        drafts = mix._pick(generated, 1, width - 1).to(torch.int32)  # the engine's lookup: S' - P + j
        rows = torch.cat([torch.tensor([o[-1] for o in out], device=dev)[:, None], drafts.long()], 1)
        s = torch.tensor(seq, device=dev)
        positions = s[:, None] + torch.arange(width, device=dev)
        slots = slot(table, positions, bs)
        _, logits = model(rows.reshape(-1), positions.reshape(-1), slots.reshape(-1), table, s + width, qsl, width)
        target = row_weights(
            logits.float().cpu(),
            temp.repeat_interleave(width),
            top_k.repeat_interleave(width),
            top_p.repeat_interleave(width),
        ).view(len(prompts), width)
        ones = torch.ones(len(prompts), width - 1)
        acc, emitted = reference_rejection_verify(drafts.cpu(), ones, None, target, seeds, torch.tensor(seq))
        for b, (a, row) in enumerate(zip(acc.tolist(), emitted.tolist())):
            out[b].extend(row[: a + 1])
            seq[b] += a + 1
    return [o[:max_new_tokens] for o in out]
