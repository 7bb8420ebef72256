"""``baseline``: the host-serial boundary, as an engine without specgen crosses it."""

from __future__ import annotations

import time
from typing import Callable

import torch

from ...runtime.buffers import alloc_step_buffers
from ..graphs import head_update
from ..profiling import host_range
from .base import Commit, Mode, register_mode

__all__ = ["BaselineMode"]

I32 = torch.int32
LINEAR_SLOTS = ("state_read_slot", "state_write_slots")  # a hybrid target's verify inputs besides


@register_mode
class BaselineMode(Mode):
    """The host-serial boundary: two host synchronizations per step.

    After the final draft the host synchronizes, stacks and casts the tokens,
    computes positions, slots, KV lengths and attention tiling, and copies
    them into the verify graph's buffers; after verification it synchronizes
    again, runs the acceptance and builds the next draft's inputs on the
    host, and copies them back.
    """

    name = "baseline"
    # what the host copies into the verify graph's buffers (everything the draft-to-verify boundary computes)
    VERIFY_INPUTS = (
        "tokens",
        "positions",
        "slot_mapping",
        "kv_lens",
        "query_start_loc",
        "row_kv_lens",
        "row_num_blocks",
        "row_last_block_len",
        "row_block_offsets",
        "max_kv_len",
        "kv_split_len",
    )

    def after_prefill(self, bonus: torch.Tensor) -> None:
        e = self.engine
        self.h_last = bonus.to(I32).cpu()
        self.h_seq = e.prompt_lens.to(I32).cpu()
        self.h_bufs = alloc_step_buffers(
            e.batch, e.width, e.block_table_width, block_size=e.block_size, scratch_block=e.scratch_block
        )
        self.h_bufs["block_table"].copy_(e.block_table.cpu())
        if e.state is not None:  # the host picks the linear state's slots after its sync, like the rest
            self.h_bufs["state_slots"].copy_(e.state.slots.cpu())
        if e.device.type == "cuda":  # pinned staging, so the H2D copies are asynchronous
            self.h_bufs = {n: t.pin_memory() for n, t in self.h_bufs.items()}

    def capture(self) -> None:
        e = self.engine
        if e.sampling is None:
            self.verify_graph = e.graph(e.forward_only)
            return
        # a sampling engine's target also gives its filtered distributions p_j (on the device, as integer weights and
        # their totals), which the host reads
        self.weights = torch.zeros(e.batch, e.width, e.model.config.vocab_size, dtype=torch.int64, device=e.device)
        self.totals = torch.zeros(e.batch, e.width, dtype=torch.int64, device=e.device)

        def forward_and_probs() -> None:
            e.forward_only()
            target = e.sampling.target_weights(e.bufs)
            self.weights.copy_(target.weights)
            self.totals.copy_(target.totals)

        self.verify_graph = e.graph(forward_and_probs)

    def verify(self, lo: int, hi: int, mark: Callable[[], None]) -> Commit:
        self._boundary_in()
        self.verify_graph()
        mark()
        return self._boundary_out()

    def _boundary_in(self) -> None:
        """Draft -> verify, host-serial: sync, stack and cast, metadata and tiling on the host, H2D copies."""
        h, bufs = self.h_bufs, self.engine.bufs
        h["draft_tokens"].copy_(bufs["draft_tokens"].cpu())  # synchronizes
        h["last_tokens"].copy_(self.h_last)
        h["seq_lens"].copy_(self.h_seq)
        linear = self.engine.state is not None
        with host_range("spec_verify_head_update"):
            head_update(h, self.engine.block_size, linear)  # h["accepted"]: the previous step's, on the host
        for n in self.VERIFY_INPUTS + (LINEAR_SLOTS if linear else ()):
            bufs[n].copy_(h[n], non_blocking=True)
        bufs["draft_tokens"].copy_(h["draft_tokens"], non_blocking=True)

    def _boundary_out(self) -> Commit:
        """Verify -> draft, host-serial: sync, then the draft's tail on the host (the proposer's) and its uploads;
        a sampling engine's host verifies by the rule (``EngineSampling.host_verify``) first."""
        h, bufs, sampling = self.h_bufs, self.engine.bufs, self.engine.sampling
        h["target_tokens"].copy_(bufs["target_tokens"].cpu())  # synchronizes
        if sampling is not None:
            with host_range("spec_rejection_verify"):  # the family the host stands in for
                sampling.host_verify(h, bufs, self.weights, self.totals)
        self.engine.proposer.host_tail(h, bufs, accept=sampling is None)
        self.h_last, self.h_seq = h["next_last_token"].clone(), h["next_seq_lens"].clone()
        self.synced_ns = time.perf_counter_ns()
        return h["accepted"].clone(), h["next_tokens"].clone()

    def close(self) -> None:
        self.verify_graph = self.h_bufs = self.weights = self.totals = None
