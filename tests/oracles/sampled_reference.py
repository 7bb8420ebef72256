"""A plain host loop of sampled speculative decoding: the tokens every engine mode must emit for a fixed seed.

It shares no code with the engine's sampling path besides ``filtered_probs`` and the keyed uniforms: the target
runs one verify forward of ``W`` rows per step (token ``t_0`` then the drafts, at positions ``S .. S + W - 1``),
the rule is ``reference_rejection_verify`` (per-row Python loops), the drafts come from an ``AcceptanceMix``
(deterministic, so each is the one-hot case ``q(x) = 1``), and the committed tokens are appended on the host.
The token after the prompt is drawn from the prefill's last row with the uniform of stream 1 at ``P - 1``.
"""

from __future__ import annotations

import torch

from specgen.engine.acceptance import AcceptanceMix
from specgen.models.paged_kv import BlockAllocator, make_block_table, slot
from specgen.runtime.philox import philox_uniform
from specgen.runtime.sampling import TOKEN_STREAM, filtered_probs, reference_rejection_verify

__all__ = ["sampled_speculative_generate"]


def _draw(dist: list[float], u: float) -> int:
    """Inverse CDF over a float64 prefix sum, left to right, capped at the last token of positive mass."""
    total, cdf = 0.0, []
    for w in dist:
        total += w
        cdf.append(total)
    token = next((i for i, c in enumerate(cdf) if c > u * total), len(dist))
    positive = [i for i, w in enumerate(dist) if w > 0]
    return min(token, positive[-1])


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
    first = filtered_probs(logits[last].float().cpu(), temp, top_k, top_p).double().tolist()
    out = [[_draw(d, float(philox_uniform(p.seed, n - 1, TOKEN_STREAM)))] for d, p, n in zip(first, params, lens)]
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
        probs = filtered_probs(
            logits.float().cpu(),
            temp.repeat_interleave(width),
            top_k.repeat_interleave(width),
            top_p.repeat_interleave(width),
        ).view(len(prompts), width, -1)
        ones = torch.ones(len(prompts), width - 1)
        acc, emitted = reference_rejection_verify(drafts.cpu(), ones, None, probs, seeds, torch.tensor(seq))
        for b, (a, row) in enumerate(zip(acc.tolist(), emitted.tolist())):
            out[b].extend(row[: a + 1])
            seq[b] += a + 1
    return [o[:max_new_tokens] for o in out]
