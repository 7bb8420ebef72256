"""The MTP head as a proposer: a two-row repair/new step, then a chain of one-row steps.

Step ``i``'s draft reads what ``prepare_next_draft`` left (``verify-to-draft``
plan): the repair row re-runs the last accepted token at its position with the
target's hidden state of the row before it (or writes the scratch slot when
every draft was accepted), the new row the bonus token; then ``W - 2`` chained
one-row steps.  Its drafts are the only step buffer it writes, so ``specgen``
runs it at the head of the runtime's step graph.
"""

from __future__ import annotations

from typing import Callable

import torch

from ...models import cuda_forward
from ...models.mtp_head import MTPHead
from ...runtime.semantics import slot
from ...specializations.plan import VERIFY_TO_DRAFT
from ..graphs import TAIL_FAMILIES, compiled_updates, tail_family
from ..profiling import host_range
from .base import Proposer

__all__ = ["MTPProposer"]

I32 = torch.int32
NEW_ROWS = slice(1, None, 2)  # of the two-row step's rows (repair, new) per sequence: the new ones


class MTPProposer(Proposer):
    """The MTP chain draft; see the module docstring."""

    tail = VERIFY_TO_DRAFT
    fusable = True
    host_families = TAIL_FAMILIES  # acceptance, then the next draft's inputs
    samples = True  # a sampling engine's chain draws each draft from the head's filtered distribution
    READS = (
        "tokens",
        "accepted",
        "next_last_token",
        "hidden_rows",
        "draft_positions",
        "draft_slots",
        "next_seq_lens",
        "block_table",
    )
    SAMPLING_READS = ("temperature", "top_k", "top_p", "seed")
    # what baseline uploads after its host tail: everything the next draft reads that the tail computes
    DRAFT_INPUTS = ("accepted", "next_last_token", "next_seq_lens", "draft_positions", "draft_slots", "hidden_rows")

    def __init__(self, head: MTPHead):
        super().__init__(head)
        self.head = head
        self._range_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    @property
    def reads(self) -> tuple[str, ...]:
        sampling = self.engine is not None and self.engine.sampling is not None
        return self.READS + (self.SAMPLING_READS if sampling else ())

    @property
    def writes(self) -> tuple[str, ...]:
        sampling = self.engine is not None and self.engine.sampling is not None
        return ("draft_tokens", "draft_probs") if sampling else ("draft_tokens",)

    def rows(self, depth: int) -> int:
        return 2

    def alloc_hidden(self) -> torch.Tensor:
        e = self.engine
        return torch.zeros(
            e.batch * e.width, e.model.config.hidden_size, dtype=e.model.embed_tokens.weight.dtype, device=e.device
        )

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        e = self.engine
        B, W, BS, dev, bt = e.batch, e.width, e.block_size, e.device, e.block_table
        toks, idx, pos, slots, qsl, r = self.prompt_rows(prompts)
        last = torch.arange(B, device=dev) * r + e.prompt_lens - 1
        hidden, logits = e.call_target(
            toks.reshape(-1),
            pos.reshape(-1),
            slots.reshape(-1),
            bt,
            e.prompt_lens,
            qsl,
            r,
            prefill_lens=e.prompt_lens,
            logit_rows=last,
        )
        bonus = self.first_tokens(logits)
        hidden = self.head.from_target(hidden)  # what the head reads of the target's hidden state
        if r > 1:  # draft prefill: token at p = 1 .. P-1 with the target hidden of p - 1
            dtoks = torch.tensor([p[1:] + [0] * (r - len(p) + 1) for p in prompts], device=dev)
            dpos = (idx + 1).expand(B, r)
            dslots = torch.where(idx < (e.prompt_lens - 1)[:, None], slot(bt, dpos, BS), torch.full_like(dpos, -1))
            self.head(  # K/V only: no logits
                dtoks.reshape(-1), dpos.reshape(-1), dslots.reshape(-1), hidden, bt, e.prompt_lens, qsl, r, slice(0, 0)
            )
        # The first draft graph input: row 1 is the bonus at position P with the hidden of P - 1.
        b = e.bufs
        base = torch.arange(B, device=dev) * W
        P = e.prompt_lens.to(I32)
        e.verify_hidden[base] = hidden[last]
        b["tokens"][base] = torch.tensor([p[-1] for p in prompts], dtype=I32, device=dev)
        b["accepted"].zero_()
        b["next_last_token"].copy_(bonus)
        b["next_seq_lens"].copy_(P)
        b["draft_positions"].copy_(torch.stack([P - 1, P], 1))
        b["draft_slots"].copy_(torch.stack([b["scratch_slot"].expand(B), slot(bt, P, BS)], 1))
        b["hidden_rows"].copy_(torch.stack([base, base], 1))
        return bonus

    def target_forward(self, bufs) -> torch.Tensor:
        """Keeps the verify rows' hidden states as the head reads them (``from_target``: the next draft's
        repair and new rows read them)."""
        e = self.engine
        hidden, logits = e.call_target(
            bufs["tokens"],
            bufs["positions"],
            bufs["slot_mapping"],
            bufs["block_table"],
            bufs["kv_lens"],
            bufs["query_start_loc"],
            e.width,
            step_bufs=bufs,
        )
        # a multi-tensor copy kernel: a plain ``copy_`` is a memcpy node, which puts the step graph in the
        # slower launch class (``benchmarks/graph_shapes.py``)
        torch._foreach_copy_([e.verify_hidden[: hidden.shape[0]]], [self.head.from_target(hidden)])
        self.keep_logits(logits)
        return self.greedy_into(logits, bufs)

    carry_writes = ("last_tokens", "seq_lens")

    def carry(self) -> None:
        """One multi-tensor copy kernel: two ``copy_`` calls would be two device-to-device memcpy nodes in the
        captured graph, which queue on the copy engines behind the host mirror's device-to-host copy."""
        b = self.engine.bufs
        torch._foreach_copy_([b["last_tokens"], b["seq_lens"]], [b["next_last_token"], b["next_seq_lens"]])

    def propose(self) -> None:
        """The head over ``prepare_next_draft``'s two rows, then the chain; writes only ``draft_tokens``."""
        e = self.engine
        b, B, W, BS, bt = e.bufs, e.batch, e.width, e.block_size, e.bufs["block_table"]
        dev = bt.device
        base, qsl2, qsl = self._ranges(B, W, dev)
        toks = torch.stack([b["tokens"][base + b["accepted"]], b["next_last_token"]], 1).reshape(-1)
        hid = e.verify_hidden[b["hidden_rows"].reshape(-1)]
        new_len = b["next_seq_lens"]
        h, logits = self.head(  # the LM head over the new rows alone (a repair row's logits are never read)
            toks,
            b["draft_positions"].reshape(-1),
            b["draft_slots"].reshape(-1),
            hid,
            bt,
            new_len + 1,
            qsl2,
            2,
            NEW_ROWS,
        )
        d, h = self._pick(logits, new_len + 1, 0), h.view(B, 2, -1)[:, 1]
        drafts, pos = [d], new_len
        for i in range(1, W - 1):
            pos = pos + 1
            h, logits = self.head(d, pos, slot(bt, pos[:, None], BS).reshape(-1), h, bt, pos + 1, qsl, 1)
            d = self._pick(logits, pos + 1, i)
            drafts.append(d)
        out = torch.stack(drafts, 1)
        if e.acceptance is not None:
            out = e.acceptance.apply(out, new_len, e.prompt_lens)
        b["draft_tokens"].copy_(out)

    def _ranges(self, B: int, W: int, dev) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(arange(B) * W, arange(B + 1) * 2, arange(B + 1))``, made once per shape outside a graph capture
        (a capture records no values, so one made inside it is used there and not kept)."""
        key = (B, W, str(dev))
        got = self._range_cache.get(key)
        if got is None:
            qsl = torch.arange(B + 1, device=dev)
            got = (torch.arange(B, device=dev) * W, qsl * 2, qsl)
            capturing = dev.type == "cuda" and torch.cuda.is_current_stream_capturing()
            if not capturing:
                self._range_cache[key] = got
        return got

    def _pick(self, logits: torch.Tensor, positions: torch.Tensor, index: int) -> torch.Tensor:
        """Draft ``index`` for the tokens at ``positions``: the argmax (the forward's argmax kernel: a greedy
        engine's, and a sampling engine's whose drafts are one-hot), or a sampling draft's draw.  With the head's
        ``draft_vocab`` the logits cover its ids alone: the argmax and a draw map back to token ids (a draw's ``q``
        is 0 outside the subset)."""
        sampling, vocab = self.engine.sampling, self.head.draft_vocab
        if sampling is not None and sampling.draft_samples:
            return sampling.draft(logits, positions, index, vocab)
        index = cuda_forward.argmax(logits, self.engine.model.argmax_kernels)
        return index if vocab is None else vocab.tokens(index)

    def host_tail(self, h: dict, bufs: dict, accept: bool = True) -> None:
        for family in self.host_families if accept else self.host_families[1:]:
            with host_range(family):
                tail_family(family, h, self.engine.block_size)
        for n in self.DRAFT_INPUTS:
            bufs[n].copy_(h[n], non_blocking=True)

    def compiled_tail(self, backend: str, sampled: bool = False) -> Callable[[dict, int], None]:
        return compiled_updates(backend)[2 if sampled else 1]
