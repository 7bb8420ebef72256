"""Host-driven decode loops over the test model: target-only greedy and speculative.

Both loops are deliberately plain; they define the tokens that every
optimised runtime must reproduce.  The speculative loop follows
``docs/kernels.md``:
verification row ``r = b * W + j`` holds token ``t_j`` at position
``S[b] + j`` (``t_0`` the last committed token), greedy prefix acceptance,
then the bonus token, then ``prepare_next_draft``'s two draft rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..models.mtp_head import MTPHead
from ..models.paged_kv import BlockAllocator, make_block_table, slot, verify_metadata
from ..models.qwen3 import Qwen3Model
from .acceptance import AcceptanceMix
from .linear_state import has_linear_state


@dataclass(slots=True)
class SpecStats:
    """Acceptance counts over the steps in which a sequence still needed tokens."""

    width: int
    steps: int = 0  # verification forwards
    drafted: int = 0
    accepted: int = 0
    accept_hist: list[int] = field(default_factory=list)  # [a] -> sequence-steps that accepted a

    def __post_init__(self):
        self.accept_hist = self.accept_hist or [0] * self.width

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted(self) -> float:
        n = sum(self.accept_hist)
        return self.accepted / n if n else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Committed tokens per sequence per verification (accepted drafts + bonus)."""
        return self.mean_accepted + 1.0


class _Layout:
    """Block table for a batch, sized for the longest prompt plus ``extra`` positions."""

    def __init__(self, prompts: list[list[int]], extra: int, block_size: int, device, seed=0):
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("need at least one prompt, each non-empty")
        self.block_size = block_size
        self.lens = torch.tensor([len(p) for p in prompts], device=device)
        width = math.ceil((max(len(p) for p in prompts) + extra) / block_size)
        self.num_blocks = len(prompts) * width
        self.block_table = make_block_table(BlockAllocator(self.num_blocks, seed), len(prompts), width, device)

    def pack(self, rows: list[list[int]], start: int) -> tuple:
        """Ragged rows padded to one width R; row i of sequence b sits at ``start + i``.

        Returns the forward's metadata ``(tokens, positions, slots, bt, kv_lens, qsl, R)``;
        padding rows write nothing.
        """
        dev = self.block_table.device
        r = max(len(x) for x in rows)
        tokens = torch.tensor([x + [0] * (r - len(x)) for x in rows], device=dev)
        lens = torch.tensor([len(x) for x in rows], device=dev)
        idx = torch.arange(r, device=dev)
        pos = start + idx.expand(len(rows), r)
        slots = torch.where(idx < lens[:, None], slot(self.block_table, pos, self.block_size), torch.full_like(pos, -1))
        qsl = torch.arange(len(rows) + 1, device=dev) * r
        return (tokens.reshape(-1), pos.reshape(-1), slots.reshape(-1), self.block_table, start + lens, qsl, r)

    def last_rows(self, r: int) -> torch.Tensor:
        return torch.arange(len(self.lens), device=self.lens.device) * r + self.lens - 1


def greedy_prefix(drafts: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``greedy_prefix_verify``'s count: leading drafts equal to the target's choices."""
    return (drafts == target[:, : drafts.shape[1]]).long().cumprod(1).sum(1)


@torch.inference_mode()
def greedy_generate(
    model: Qwen3Model, prompts: list[list[int]], max_new_tokens: int, block_size: int = 16
) -> list[list[int]]:
    """Target-only greedy decoding: one prefill, then one token per forward.

    A hybrid target keeps sequence ``b``'s linear state in slot ``b``: the
    prefill starts from the zero state and writes it after the last prompt row,
    every later forward reads and rewrites it.
    """
    if max_new_tokens <= 0:
        return [[] for _ in prompts]
    lay = _Layout(prompts, max_new_tokens, block_size, model.embed_tokens.weight.device)
    model.allocate_kv_cache(lay.num_blocks, block_size)
    packed = lay.pack(prompts, 0)
    last, own = lay.last_rows(packed[-1]), torch.arange(len(prompts), dtype=torch.int32, device=lay.lens.device)
    state = has_linear_state(model)
    if state:
        model.allocate_linear_state(len(prompts))
        write = torch.full_like(packed[0], -1, dtype=torch.int32).index_copy_(0, last, own)
        state = {"state_read": torch.full_like(own, -1), "state_write": write}
    _, logits = model(*packed, logit_rows=last, **(state or {}))
    tok = model.greedy_tokens(logits)
    out = [[t] for t in tok.tolist()]
    seq_lens, bt = lay.lens.clone(), lay.block_table
    qsl = torch.arange(len(prompts) + 1, device=bt.device)
    state = state and {"state_read": own, "state_write": own}
    for _ in range(max_new_tokens - 1):
        slots = slot(bt, seq_lens[:, None], block_size).reshape(-1)
        _, logits = model(tok, seq_lens, slots, bt, seq_lens + 1, qsl, 1, **(state or {}))
        tok = model.greedy_tokens(logits)
        seq_lens += 1
        for o, t in zip(out, tok.tolist()):
            o.append(t)
    return out


def _draft_chain(draft: MTPHead, logits, hidden, seq_lens, n: int, lay: _Layout) -> torch.Tensor:
    """``n`` drafts; the first comes from ``logits`` (the row at position ``S``); a head's ``draft_vocab`` maps
    each argmax index back to its token id."""
    b = seq_lens.shape[0]
    qsl = torch.arange(b + 1, device=seq_lens.device)
    vocab = draft.draft_vocab
    pick = (lambda x: x.argmax(-1)) if vocab is None else (lambda x: vocab.tokens(x.argmax(-1)))
    d, pos, drafts = pick(logits), seq_lens, []
    drafts.append(d)
    for _ in range(n - 1):
        pos = pos + 1
        slots = slot(lay.block_table, pos[:, None], lay.block_size).reshape(-1)
        hidden, logits = draft(d, pos, slots, hidden, lay.block_table, pos + 1, qsl, 1)
        d = pick(logits)
        drafts.append(d)
    return torch.stack(drafts, 1)


def _next_draft_rows(draft: MTPHead, tokens, hidden, accepted, next_lens, bonus, width, lay: _Layout):
    """``prepare_next_draft``'s repair row and new row through the head; returns row 1's output.

    The repair row writes (position ``S' - 1``) only when every draft was
    accepted; otherwise its slot is -1, the scratch that writes nothing.
    """
    b = accepted.shape[0]
    base = torch.arange(b, device=accepted.device) * width
    pos = torch.stack([next_lens - 1, next_lens], 1)
    slots = slot(lay.block_table, pos, lay.block_size)
    slots[:, 0] = torch.where(accepted == width - 1, slots[:, 0], torch.full_like(slots[:, 0], -1))
    rows = torch.stack([base + (accepted - 1).clamp(min=0), base + accepted], 1).reshape(-1)
    toks = torch.stack([tokens[base + accepted], bonus], 1).reshape(-1)
    qsl = torch.arange(b + 1, device=accepted.device) * 2
    hid = draft.from_target(hidden[rows])
    h, logits = draft(toks, pos.reshape(-1), slots.reshape(-1), hid, lay.block_table, next_lens + 1, qsl, 2)
    return logits.view(b, 2, -1)[:, 1], h.view(b, 2, -1)[:, 1]


@torch.inference_mode()
def speculative_generate(
    model: Qwen3Model,
    draft: MTPHead | AcceptanceMix,
    prompts: list[list[int]],
    max_new_tokens: int,
    depth: int,
    block_size: int = 16,
) -> tuple[list[list[int]], SpecStats]:
    """Greedy speculative decoding with ``depth`` drafts per step (W = depth + 1).

    The outputs equal ``greedy_generate(model, prompts, max_new_tokens)``.
    Like ``greedy_generate``, it allocates fresh KV caches on ``model`` (and
    on an ``MTPHead``) sized for this batch.  An ``AcceptanceMix`` without an
    oracle that covers these prompts gets one from ``greedy_generate``.
    """
    if max_new_tokens <= 0:
        return [[] for _ in prompts], SpecStats(depth + 1)
    w, mtp = depth + 1, isinstance(draft, MTPHead)
    if not mtp:  # the oracle run reallocates the target's cache, so it goes first
        draft = _with_oracle(draft, model, prompts, max_new_tokens + w)
    lay = _Layout(prompts, max_new_tokens + w + 1, block_size, model.embed_tokens.weight.device)
    model.allocate_kv_cache(lay.num_blocks, block_size)
    packed = lay.pack(prompts, 0)
    last = lay.last_rows(packed[-1])
    hidden, logits = model(*packed, logit_rows=last)
    bonus = model.greedy_tokens(logits)
    out = [[t] for t in bonus.tolist()]
    seq_lens = lay.lens.clone()
    if mtp:  # draft prefill: token at p with the target hidden of p - 1, p = 1 .. S
        draft.allocate_kv_cache(lay.num_blocks, block_size)
        dpacked = lay.pack([p[1:] + o for p, o in zip(prompts, out)], 1)
        dh, dl = draft(*dpacked[:3], draft.from_target(hidden), *dpacked[3:])
        d_logits, d_hidden = dl[last], dh[last]
    stats = SpecStats(w)
    while min(len(o) for o in out) < max_new_tokens:
        if mtp:
            drafts = _draft_chain(draft, d_logits, d_hidden, seq_lens, w - 1, lay)
        else:
            drafts = draft.propose(torch.tensor([len(o) for o in out], device=seq_lens.device), w - 1)
        tokens = torch.cat([bonus[:, None], drafts], 1).reshape(-1)
        meta = verify_metadata(seq_lens, lay.block_table, w, block_size)
        hidden, logits = model(tokens, *meta[:2], lay.block_table, *meta[2:], w)
        target = model.greedy_tokens(logits).view(-1, w)
        accepted = greedy_prefix(drafts, target)
        _record(stats, out, target.tolist(), accepted.tolist(), max_new_tokens)
        bonus = target.gather(1, accepted[:, None]).squeeze(1)
        seq_lens = seq_lens + accepted + 1
        if mtp:
            d_logits, d_hidden = _next_draft_rows(draft, tokens, hidden, accepted, seq_lens, bonus, w, lay)
    return [o[:max_new_tokens] for o in out], stats


def _with_oracle(mix: AcceptanceMix, model: Qwen3Model, prompts: list[list[int]], horizon: int) -> AcceptanceMix:
    """``mix`` itself when its oracle covers ``horizon`` tokens of every prompt, else bound to greedy decoding."""
    if mix.covers(len(prompts), horizon):
        return mix
    oracle = torch.tensor(greedy_generate(model, prompts, horizon), device=model.embed_tokens.weight.device)
    return mix.bound(oracle, model.config.vocab_size)


def _record(stats: SpecStats, out, target, accepted, max_new_tokens: int) -> None:
    """Commit accepted drafts + bonus (``target[b][:a + 1]``); count active sequences only."""
    stats.steps += 1
    for o, t, a in zip(out, target, accepted):
        if len(o) < max_new_tokens:
            stats.drafted += stats.width - 1
            stats.accepted += a
            stats.accept_hist[a] += 1
        o.extend(t[: a + 1])
