"""How ``SpecVerifyRuntime`` turns a bucket's step into one captured graph: the prologue with the hoisted
head work beside it, the device guard forked beside the steps, the epilogue, a sampling tail's ``sampler``; and
the eager step that stands in for it (``runtime/verify_graph.py`` describes the whole; this is the runtime's
capture half)."""

from __future__ import annotations

import warnings
from typing import Mapping

import torch

from ..specializations.families import FAMILIES
from .step_plan import SAMPLE_ROWS, eager_step, run_steps

GUARD_READS = frozenset({"seq_lens", "block_table", "accepted"})  # what the device guard's checks read

__all__ = ["StepCapture"]


class StepCapture:
    """The capture methods of ``SpecVerifyRuntime`` (which owns every attribute they read)."""

    def _sequence(self, bucket: int):
        """The bucket's whole step as one call: the device guard forks, the steps run, the guard joins."""
        bufs, guard = self._bufs[bucket], self._guard

        mirror = self._mirror if self._mirror is not None and self._mirror.in_graph else None
        # the prologue's side stream waits for the last copy of the graph staging early in the step (off the draft)
        side_waits = self.prologue is not None and bool(self.hoisted) and self._hoist_stream is not None

        def run() -> None:
            waited = side_waits
            checked = False  # whether the guard's checks ran beside the draft
            if self.prologue is not None:  # the draft writes the inputs the guard and the head read
                checked = self._run_prologue(bufs, bucket, mirror)
            if guard is None or checked:  # the device guard turned off (``device_guard=False``), or done
                run_steps(bufs, self.sequence, self.model_forward, self._call_kernel, sampler=self.sampler)
            else:
                # the head first (a replay starts a graph's independent branches in the order they were captured,
                # and the head leads the critical path); the checks beside it read the inputs as the step found them
                head = self.sequence[: self._leading_head()]
                guard.mark()
                run_steps(bufs, head, self.model_forward, self._call_kernel)
                guard.fork(bufs, bucket)
                if mirror is not None and guard.stream is not None:  # the pack's wait, off the critical path
                    mirror.wait_copied(guard.stream)
                    waited = True
                run_steps(
                    bufs,
                    self.sequence[len(head) :],
                    self.model_forward,
                    self._call_kernel,
                    after_forward=guard.join,
                    sampler=self.sampler,
                )
                guard.join()
            if self.epilogue is not None:
                self.epilogue()
            if mirror is not None:  # the host fields packed in the graph: no launch between this step and the next
                flag = guard.flag if guard is not None else None
                mirror.pack_in_graph(bufs, bucket, flag, waited=waited)

        return run

    def _eager_bufs(
        self, batch, last_tokens, draft_tokens, seq_lens, block_table, linear=None, sampling=None
    ) -> dict[str, torch.Tensor]:
        # the model's cache layout (caps.block_size, the table's width) is the truth on the eager path;
        # a hybrid's eager step reads the committed linear state from the slot the fast path would
        accepted, state_slots = linear if linear is not None else (None, None)
        return eager_step(
            self.model_forward,
            self.width,
            self.caps.block_size,
            self.num_splits,
            last_tokens,
            draft_tokens,
            seq_lens,
            block_table,
            scratch_block=self.scratch_block,
            device=self.device,
            tail=self.tail,
            accepted=accepted,
            state_slots=state_slots,
            sampling=sampling,
            sampler=self.sampler,
        )

    def _left_fast_path(self, reason: str) -> None:
        """Count an eager step; the first one of a runtime built for the fast path is also a warning."""
        self._fallback[reason] += 1
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"SpecVerifyRuntime(width={self.width}): a step left the fast path ({reason}); it ran on the "
                f"families' torch semantics, and stats()['fallback'] counts every such step by reason",
                RuntimeWarning,
                stacklevel=3,
            )

    def _run_prologue(self, bufs: Mapping[str, torch.Tensor], bucket: int, mirror=None) -> bool:
        """The prologue's setup, then its run with the hoisted head work beside it (a side stream on a device);
        a setup that the run does not depend on (``Prologue.setup_beside``) goes to the side stream too, and so
        do the device guard's checks, after the head work: they read the step's lengths, its table and the last
        step's counts, which the draft does not write, and so run in the draft's shadow instead of beside the
        forward, with no join before the tail.  The side stream first waits for the host copy of the last step's
        graph staging (``mirror``), which this step's pack overwrites at its end (the copy is in flight when the
        step starts; the wait holds back only the side stream's work, in the draft's shadow).  Returns whether the
        guard's checks ran here."""
        p, side = self.prologue, self._hoist_stream
        if not self.hoisted:
            p()
            return False
        beside = side is not None and p.setup_beside  # the setup goes to the side stream, ahead of the head work
        if p.setup is not None and not beside:
            p.setup()
        hoisted = lambda: run_steps(bufs, self.hoisted, self.model_forward, self._call_kernel)  # noqa: E731
        if side is None:
            hoisted()
            p.run()
            return False
        main = self._api.current_stream(self.device)
        side.wait_stream(main)
        # the draft first: a replay launches a graph's independent branches in the order they were captured,
        # and the draft is the step's critical path (its first kernel then starts with the graph, not behind
        # the side stream's first launches)
        p.run()
        with self._api.stream(side):
            if mirror is not None:  # first: the side stream's launches then start after the draft's first ones
                mirror.wait_copied(side)
            if beside:
                p.setup()
            hoisted()
            if self._guard is not None:
                self._guard.check(bufs, bucket)
        main.wait_stream(side)
        return self._guard is not None

    def _leading_head(self) -> int:
        """How many of the sequence's first steps may be captured ahead of the device guard's checks: the kernel
        steps before the forward that write nothing the checks read (``seq_lens``, ``block_table``, ``accepted``)."""
        n = 0
        for step in self.sequence:
            if step.kind != "kernel" or step.name == SAMPLE_ROWS:
                break
            if {a.name for a in FAMILIES[step.variant.family].outputs} & GUARD_READS:
                break
            n += 1
        return n

    def _capture(self, bucket: int) -> None:
        self._graphs.capture(bucket, self._sequence(bucket))
        if self._guard is not None:
            self._guard.flag.zero_()  # the warm-up runs saw whatever the buffers held before the first step

    def capture(self, batch: int) -> None:
        """Capture ``batch``'s bucket now (CUDA / NPU), over what its buffers hold."""
        if self._api is not None and self._bufs and 1 <= batch <= self.max_batch:
            bucket = self._bucket(batch)
            if bucket not in self._graphs:
                self._capture(bucket)

    def capture_all(self) -> None:
        """Capture every bucket now (CUDA / NPU) instead of on its first step."""
        if self._api is not None and self.caps.supports_in_graph_input_update and self.step_plan.unavailable is None:
            for bucket in self.buckets:
                if bucket not in self._graphs:
                    self._capture(bucket)

    def buffers(self, batch: int) -> dict[str, torch.Tensor]:
        """The persistent buffers of ``batch``'s bucket (stable addresses), for ``step_in_place``.

        Raises ``LookupError`` when the fast path has no buffers (capability
        off, variants not built, or ``batch`` beyond the buckets).
        """
        if not self._bufs or not 1 <= batch <= self.max_batch:
            raise LookupError(
                f"no persistent buffers for batch {batch}: {self._reason(batch, None, (0, 0)) or 'batch out of range'}"
            )
        return self._bufs[self._bucket(batch)]
