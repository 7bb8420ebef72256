"""A block draft (DFlash, DSpark) as a proposer: one block forward per step, context K/V from the target's taps.

What changes against the MTP chain:

* the target forward taps the draft's context layers; ``verify_hidden`` holds
  the taps of the verify rows ``[B * W, L_ctx * H]``;
* prefill writes context K/V for every prompt row;
* the draft is one block forward (``BlockDraft.propose``) from the anchor
  ``next_last_token`` at ``next_seq_lens`` (it carries the inputs itself);
* after verification the accepted rows' taps become context K/V and the next
  block's inputs are set: the ``context-kv`` plan's tail (``greedy_prefix_verify``,
  ``context_kv_update``: the accepted rows' context slots; ``prepare_next_block``:
  the next block's anchor token and length), then ``epilogue`` (the context projection over
  every verify row, writing only the accepted rows' slots).

Verification is ``W = K + 1`` rows wide for both kinds; the draft forward
has ``rows(K)`` rows (``K + 1`` for DFlash, ``K`` for DSpark).  With side
streams (the default) the draft graph runs before the first step only: ``specgen``'s step graph ends with
the next step's block forward (``draft_at_end``, after the tail and the
context stores it reads); ``draft_at_end=False`` (and the serving loop, whose
rows change between steps) keeps the draft graph before every step.  On one stream
(``side_streams=False``) ``specgen`` runs the block forward at the head of
the step graph as the runtime's prologue (``carry``, then ``propose``), as the
MTP chain does, so a step is one graph.
``inductor`` is the MTP plan's compiled pipeline and is not run here.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Callable

import torch

from ...models.block_draft import BlockDraft
from ...models.errors import EngineError
from ...runtime import semantics
from ...specializations.plan import CONTEXT_KV
from .base import Proposer

__all__ = ["BlockProposer", "block_tail"]

I32 = torch.int32
BESIDE_ENV = "SPECGEN_CONTEXT_BESIDE"  # 0: the context projection wholly after the tail (the A/B base)
_TAILS: dict[tuple[str, bool], Callable] = {}


def block_tail(b: dict, block_size: int, acceptance: str = "greedy_prefix_verify") -> None:
    """Acceptance (``acceptance``: ``greedy_prefix_verify``, or ``spec_rejection_verify`` after a sampling
    step's vocabulary pass), context slots and the next block's inputs as plain torch over step buffers."""
    semantics.run_semantics(acceptance, b, block_size=block_size)
    semantics.run_semantics("context_kv_update", b, block_size=block_size)
    semantics.run_semantics("prepare_next_block", b, block_size=block_size)


class BlockProposer(Proposer):
    """A DFlash / DSpark block draft; see the module docstring."""

    tail = CONTEXT_KV
    can_trail = True  # its inputs (the anchor, its length, the context rows) are all written by the step's tail
    _beside = _side = _held = None  # the staged context rows (``alloc_hidden``): none until set up
    unsupported_modes = ("inductor",)
    reads = ("next_last_token", "next_seq_lens", "block_table")
    carry_writes = ("last_tokens", "seq_lens")
    DRAFT_INPUTS = ("accepted", "next_last_token", "next_seq_lens")
    epilogue_names = ("context_kv_projection",)

    def __init__(self, draft: BlockDraft):
        super().__init__(draft)
        self.draft = draft

    def bind(self, engine) -> None:
        super().bind(engine)
        if engine.width > engine.capacity:
            raise EngineError(
                f"a block of {engine.width} rows is wider than the KV layout allows "
                f"({engine.block_table_width} x {engine.block_size} = {engine.capacity} positions)"
            )

    def rows(self, depth: int) -> int:
        return self.draft.rows(depth)

    def alloc_hidden(self) -> torch.Tensor:
        e = self.engine
        taps = len(self.draft.tap_layers) * e.model.config.hidden_size
        rows, dtype = e.batch * e.width, e.model.embed_tokens.weight.dtype
        self._beside = self._side = None
        if self._projects_beside(e):
            # the context rows the forward's taps give, made on a side stream beside the target's later layers and
            # LM head (``_stage``, ``_project``); the tail then only stores the accepted rows (``context_write``).
            # Every target forward writes them, as it writes ``verify_hidden``: they are that buffer, projected
            c, w = self.draft.target_config, self.draft.fc.weight
            self._beside = [torch.zeros(rows, 2 * c.num_kv_heads * c.head_dim, dtype=w.dtype, device=e.device)
                            for _ in self.draft.layers]  # fmt: skip
            self._side = torch.cuda.Stream(device=e.device)
        self._held = None
        return torch.zeros(rows, taps, dtype=dtype, device=e.device)

    def release(self) -> None:
        self._beside = self._side = self._held = None

    def _projects_beside(self, e) -> bool:
        """Whether the context rows are made beside the forward: CUDA, the fast projection, a target whose forward
        calls back when its taps are ready, side streams on (``side_streams``), and ``SPECGEN_CONTEXT_BESIDE`` not
        0 (the A/B switch)."""
        if e.device.type != "cuda" or not e.side_streams or os.environ.get(BESIDE_ENV, "1") == "0":
            return False
        return self.draft.fast_on(e.device) and "on_taps" in inspect.signature(e.model.forward).parameters

    def _stage(self, taps: torch.Tensor) -> None:
        """``on_taps``: the side stream waits for ``taps`` here; ``_project`` enqueues their rows there once the
        forward is issued (``target_forward`` joins it before it returns, so both are ready for the tail)."""
        self._side.wait_stream(torch.cuda.current_stream(taps.device))
        self._held = taps  # read on the side stream: held until the join

    def _project(self) -> None:
        """``taps`` into ``verify_hidden`` and their context rows into the staging buffers, on the side stream.
        Captured after the forward's later layers: in the profiled replays of 080bbba, which captured these rows
        first, the rows kept the forking stream and the later layers, LM head and argmax moved to another, and
        the tail then waited about 3 us across streams where a node on the same stream starts about 0.4 us after
        the last."""
        taps = self._held
        with torch.cuda.stream(self._side):
            self.engine.verify_hidden[: taps.shape[0]].copy_(taps)
            for buf, kv in zip(self._beside, self.draft.context_rows(taps)):
                buf[: kv.shape[0]].copy_(kv)

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Target prefill with taps; context K/V for every prompt row; the first block's inputs."""
        e = self.engine
        B, dev, bt = e.batch, e.device, e.block_table
        toks, _, pos, slots, qsl, r = self.prompt_rows(prompts)
        last = torch.arange(B, device=dev) * r + e.prompt_lens - 1
        _, logits, taps = e.call_target(
            toks.reshape(-1),
            pos.reshape(-1),
            slots.reshape(-1),
            bt,
            e.prompt_lens,
            qsl,
            r,
            taps=self.draft.tap_layers,
            prefill_lens=e.prompt_lens,
            logit_rows=last,
        )
        bonus = self.first_tokens(logits)
        self.draft.write_context(taps, pos.reshape(-1), slots.reshape(-1))  # padding rows write nothing
        b = e.bufs
        b["accepted"].zero_()
        b["next_last_token"].copy_(bonus)
        b["next_seq_lens"].copy_(e.prompt_lens.to(I32))
        return bonus

    def target_forward(self, bufs) -> torch.Tensor:
        """The target over the verify rows, keeping the tapped layers."""
        e = self.engine
        self._held = None
        _, logits, taps = e.call_target(
            bufs["tokens"],
            bufs["positions"],
            bufs["slot_mapping"],
            bufs["block_table"],
            bufs["kv_lens"],
            bufs["query_start_loc"],
            e.width,
            taps=self.draft.tap_layers,
            step_bufs=bufs,
            on_taps=None if self._beside is None else self._stage,
        )
        if self._held is None:  # a copy kernel: a plain ``copy_`` is a memcpy node in the step graph
            torch._foreach_copy_([e.verify_hidden[: taps.shape[0]]], [taps])
        else:
            self._project()
        self.keep_logits(logits)
        out = self.greedy_into(logits, bufs)
        if self._held is not None:  # the join: the tail reads what the side stream wrote
            torch.cuda.current_stream(taps.device).wait_stream(self._side)
            self._held = None
        return out

    @property
    def fusable(self) -> bool:
        """Whether ``specgen`` runs the block forward inside its step graph: on one stream (one graph a step)."""
        return self.engine is not None and not self.engine.side_streams

    @property
    def writes(self) -> tuple[str, ...]:
        """What ``propose`` writes: the drafts, and the anchor and its length unless ``carry`` does (fused)."""
        return ("draft_tokens",) if self.fusable else ("draft_tokens", "last_tokens", "seq_lens")

    def carry(self) -> None:
        """Fused: the anchor and its length become the verification's last token and length; otherwise ``propose``
        does it, after the draft."""
        if self.fusable:
            self._carry_anchor()

    def _carry_anchor(self) -> None:
        """``last_tokens`` / ``seq_lens`` <- the anchor and its length: one multi-tensor copy kernel (two ``copy_``
        calls are two memcpy nodes, which put a captured graph in the slower launch class)."""
        b = self.engine.bufs
        torch._foreach_copy_([b["last_tokens"], b["seq_lens"]], [b["next_last_token"], b["next_seq_lens"]])

    def propose(self) -> None:
        """One block forward from the anchor; writes the verification's draft tokens (and, unfused, its last token
        and length)."""
        e = self.engine
        b = e.bufs
        anchor, seq_lens = b["next_last_token"], b["next_seq_lens"]
        out = self.draft.propose(anchor, seq_lens, b["block_table"], e.width - 1)
        if e.acceptance is not None:
            out = e.acceptance.apply(out, seq_lens, e.prompt_lens)
        b["draft_tokens"].copy_(out)
        if not self.fusable:
            self._carry_anchor()

    def context_write(self) -> None:
        """Every verify row's taps -> context K/V at ``context_slots`` (-1 for rejected rows: no write)."""
        b = self.engine.bufs
        rows = b["positions"].shape[0]  # the step's rows (a serving loop's buffers may hold fewer than the taps)
        if self._beside is not None:  # the last forward's rows, projected beside it (the same GEMMs, the same rows)
            self.draft.store_context([r[:rows] for r in self._beside], b["positions"], b["context_slots"])
            return
        self.draft.write_context(self.engine.verify_hidden[:rows], b["positions"], b["context_slots"])

    def draft_work_after_verify(self) -> Callable[[], None]:
        return self.context_write

    def epilogue(self) -> Callable[[], None]:
        # the next block's anchor and length come from the tail (``prepare_next_block``), before the projection
        return self.context_write

    def host_tail(self, h: dict, bufs: dict, accept: bool = True) -> None:
        """Host-serial, as the DFlash pull request's eager path (docs/references.md): compact context rows built
        and uploaded by the host."""
        e = self.engine
        if accept:
            semantics.run_semantics("greedy_prefix_verify", h, block_size=e.block_size)
        acc, seq = h["accepted"].tolist(), h["seq_lens"].tolist()
        # the context rows, sequence by sequence, up to the first rejection; every other row writes nothing
        slots = torch.full((e.batch * e.width,), -1, dtype=I32)
        for b, (a, s) in enumerate(zip(acc, seq)):
            pos = torch.arange(s, s + a + 1)
            rows = slice(b * e.width, b * e.width + a + 1)
            slots[rows] = semantics.slot(h["block_table"][b : b + 1], pos[None], e.block_size).reshape(-1)
        bufs["context_slots"].copy_(slots.pin_memory() if e.device.type == "cuda" else slots, non_blocking=True)
        # the projection runs over every verify row: a GEMM row's bits depend on the row count
        self.context_write()
        a = h["accepted"].long()
        h["next_last_token"].copy_(h["target_tokens"].gather(1, a[:, None]).squeeze(1))
        h["next_seq_lens"].copy_(h["seq_lens"] + h["accepted"] + 1)
        for n in self.DRAFT_INPUTS:
            bufs[n].copy_(h[n], non_blocking=True)

    def compiled_tail(self, backend: str, sampled: bool = False) -> Callable[[dict, int], None]:
        key = (backend, sampled)
        if key not in _TAILS:
            fn = functools.partial(block_tail, acceptance="spec_rejection_verify") if sampled else block_tail
            _TAILS[key] = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)
        compiled = _TAILS[key]

        def tail(bufs: dict, block_size: int) -> None:
            compiled(bufs, block_size)
            self.context_write()

        return tail
