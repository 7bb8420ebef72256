"""Reference semantics of the ops in the boundary graphs (torch, any device).

Each function takes the op's reads positionally and returns its writes as a
tuple.  The per-field updates here are what an engine's host code does today;
composed by the fuse pass they must equal the kernel families of
``docs/kernels.md``, whose torch semantics live in ``runtime.semantics`` (the
one ``slot`` used here comes from there; it returns int32, the dtype the
boundary graphs declare for slot buffers).
"""

from __future__ import annotations

import torch

from ...runtime import semantics
from ...runtime.philox import philox_uniform
from ...runtime.sampling import ACCEPT_STREAM
from ...runtime.semantics import slot

VOCAB = 1000
_I32 = torch.int32


def _rows(seq_lens, W):
    j = torch.arange(W, dtype=torch.int64, device=seq_lens.device)
    return seq_lens.to(torch.int64)[:, None] + j[None, :]  # [B, W] positions


# -- draft -> verify ----------------------------------------------------------
def draft_step(col: int):
    def fn(draft_tokens, draft_hidden):
        out = draft_tokens.clone()
        prev = draft_hidden if col == 0 else draft_tokens[:, col - 1].to(torch.int64)
        out[:, col] = ((prev.to(torch.int64) * 131 + 7 * col + 3) % VOCAB).to(out.dtype)
        return (out,)

    return fn


def stack_tokens(last_tokens, draft_tokens):
    tok = torch.cat([last_tokens.to(_I32)[:, None], draft_tokens.to(_I32)], dim=1)
    return (tok.reshape(-1).contiguous(),)


def positions(W):
    return lambda seq_lens: (_rows(seq_lens, W).reshape(-1).to(_I32),)


def slots(W, BS):
    return lambda seq_lens, block_table: (slot(block_table, _rows(seq_lens, W), BS).reshape(-1),)


def kv_lens(W):
    return lambda seq_lens: ((seq_lens + W).to(_I32),)


def query_start(W):
    def fn(seq_lens):
        B = seq_lens.shape[0]
        return ((torch.arange(B + 1, device=seq_lens.device) * W).to(_I32),)

    return fn


def tiling(W, BS, NS):
    def fn(seq_lens):
        kv = _rows(seq_lens, W) + 1
        nb = (kv + BS - 1) // BS
        last = kv - (nb - 1) * BS
        offs = torch.zeros(kv.numel() + 1, dtype=torch.int64, device=seq_lens.device)
        offs[1:] = torch.cumsum(nb.reshape(-1), 0)
        mx = kv.max().reshape(1)
        split = ((mx + BS - 1) // BS + NS - 1) // NS * BS
        return tuple(t.reshape(-1).to(_I32) for t in (kv, nb, last, offs, mx, split))

    return fn


def linear_state(accepted, state_slots):
    """The linear state's slots as the host picks them: the committed slot, each row's own."""
    B, W = state_slots.shape
    read = torch.empty(B, dtype=_I32, device=state_slots.device)
    write = torch.empty(B * W, dtype=_I32, device=state_slots.device)
    semantics.spec_verify_linear_state_update(accepted, state_slots, read, write)
    return read, write


def graph_task_params(seq_lens):
    return ((seq_lens % 4).to(_I32),)


def mix(*tensors, rows: int, cols: int):
    """A stand-in target/draft forward: every input element influences the result."""
    acc = torch.zeros(rows * cols, dtype=torch.int64, device=tensors[0].device)
    for k, t in enumerate(tensors):
        flat = t.reshape(-1).to(torch.int64)
        if flat.numel() == 0:
            continue
        idx = torch.arange(rows * cols, device=flat.device) % flat.numel()
        acc = acc * 3 + flat[idx] * (2 * k + 5) + flat.sum()
    return (torch.remainder(acc, VOCAB).reshape(rows, cols).to(_I32),)


# -- verify -> next draft -------------------------------------------------------
def accept_match(draft_tokens, target_tokens):
    W = target_tokens.shape[1]
    return ((draft_tokens.to(torch.int64) == target_tokens[:, : W - 1].to(torch.int64)).to(_I32),)


def accept_len(match):
    return (torch.cumprod(match.to(torch.int64), dim=1).sum(dim=1).to(_I32),)


def accept_select(accepted, target_tokens):
    W = target_tokens.shape[1]
    j = torch.arange(W, device=target_tokens.device)[None, :]
    keep = j <= accepted.to(torch.int64)[:, None]
    return (torch.where(keep, target_tokens.to(_I32), torch.full_like(target_tokens, -1, dtype=_I32)),)


def _pick(t, col):
    return torch.gather(t.to(torch.int64), 1, col.to(torch.int64)[:, None])[:, 0]


def next_last_token(accepted, target_tokens):
    return (_pick(target_tokens, accepted).to(_I32),)


def next_seq_lens(accepted, seq_lens):
    return ((seq_lens.to(torch.int64) + accepted + 1).to(_I32),)


def draft_positions(accepted, seq_lens):
    s1 = seq_lens.to(torch.int64) + accepted + 1
    return (torch.stack([s1 - 1, s1], dim=1).to(_I32),)


def draft_slots(W, BS):
    def fn(accepted, seq_lens, block_table, scratch_slot):
        s1 = seq_lens.to(torch.int64) + accepted + 1
        pos = torch.stack([s1 - 1, s1], dim=1)
        sl = slot(block_table, pos, BS)
        repair = torch.where(
            accepted.to(torch.int64) == W - 1,
            sl[:, 0].to(torch.int64),
            scratch_slot.to(torch.int64).expand(accepted.shape[0]),
        )
        return (torch.stack([repair, sl[:, 1].to(torch.int64)], dim=1).to(_I32),)

    return fn


def hidden_rows(W):
    def fn(accepted):
        B = accepted.shape[0]
        base = torch.arange(B, device=accepted.device, dtype=torch.int64) * W
        a = accepted.to(torch.int64)
        return (torch.stack([base + torch.clamp(a - 1, min=0), base + a], dim=1).to(_I32),)

    return fn


# -- sampled verification ----------------------------------------------------------------
def logits(B: int, W: int):
    """A stand-in target forward of a sampling batch: float logits that every input influences."""

    def fn(*xs):
        (mixed,) = mix(*xs, rows=B, cols=W)
        return (mixed.float() / VOCAB,)

    return fn


def sample_rows(target_logits, draft_tokens, draft_probs, temperature, top_k, top_p, seeds, seq_lens):
    """A stand-in of the vocabulary pass (``runtime.sampling.rejection_inputs``): each row's token and
    ``p_j(x_j)`` from the logits and the sampling parameters, and the real acceptance uniforms (stream 0
    at the rows' positions ``seq_lens + j``)."""
    B, W = target_logits.shape
    (mixed,) = mix(target_logits * VOCAB, draft_tokens, draft_probs * VOCAB, temperature * VOCAB, top_k, rows=B, cols=W)
    p_at = (mixed[:, :-1].double() / VOCAB * top_p.double()[:, None]).float()
    j = torch.arange(W - 1, device=seq_lens.device)
    u = philox_uniform(seeds.long()[:, None], seq_lens.long()[:, None] + j, ACCEPT_STREAM)
    return mixed, p_at, u


def accept_ratio(draft_tokens, target_tokens, draft_probs, target_draft_probs, accept_uniforms, temperature):
    """Which drafts pass on their own: a greedy row's draft equals the target's token, a sampled row's has
    ``u * q < p`` (float64)."""
    W = target_tokens.shape[1]
    match = draft_tokens.to(torch.int64) == target_tokens[:, : W - 1].to(torch.int64)
    ratio = accept_uniforms.double() * draft_probs.double() < target_draft_probs.double()
    return (torch.where((temperature <= 0)[:, None], match, ratio).to(_I32),)


def sampled_select(accepted, draft_tokens, target_tokens):
    """The committed tokens of a sampled step: the accepted drafts, the row's token at ``accepted``, then -1."""
    W = target_tokens.shape[1]
    j = torch.arange(W, device=target_tokens.device)[None, :]
    a = accepted.to(torch.int64)[:, None]
    drafts = torch.cat([draft_tokens.to(_I32), torch.full_like(draft_tokens[:, :1], -1, dtype=_I32)], dim=1)
    row_token = torch.where(j == a, target_tokens.to(_I32), torch.full_like(target_tokens, -1, dtype=_I32))
    return (torch.where(j < a, drafts, row_token),)


# -- context K/V (block drafts) ---------------------------------------------------
def context_slots_all(W, BS):
    return lambda seq_lens, block_table: (slot(block_table, _rows(seq_lens, W), BS).reshape(-1),)


def context_mask(W):
    def fn(accepted, slots_all):
        j = torch.arange(W, device=accepted.device)[None, :]
        keep = j <= accepted.to(torch.int64)[:, None]
        masked = torch.where(keep, slots_all.reshape(-1, W), torch.full_like(slots_all.reshape(-1, W), -1))
        return (masked.reshape(-1).to(_I32),)

    return fn
