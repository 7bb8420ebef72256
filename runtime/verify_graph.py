"""One speculative-verify step as a fixed sequence over persistent buffers.

The sequence is the build's boundary plans (``runtime/step_plan.py``): the
draft-to-verify graph ops (token, metadata and attention-tiling updates, then
``target_forward``) followed by the verify-to-draft ops after
``target_forward`` (``spec_verify_tail_update``: ``greedy_prefix_verify``, then
``prepare_next_draft``, one launch; their two launches where the build lacks it).  Each
kernel op calls the built variant; ``target_forward`` calls the engine's
``model_forward(bufs) -> target_tokens[B, W]``, which reads the persistent
buffers (``tokens``, ``positions``, ``slot_mapping``, ``kv_lens``,
``query_start_loc``, ``block_table``, the ``row_*`` tiling fields, ...); it may
return ``target_tokens`` itself, written in place, and no copy follows.

    rt = SpecVerifyRuntime(lib, model_forward, capabilities_of(model), width=4)
    res = rt.step(last_tokens, draft_tokens, seq_lens, block_table, seq_len_bounds=(lo, hi))
    rt.stats()  # {"fast_path": n, "fallback": {"guard_failed": k, ...}, "device_guard": {...}}

Buffers exist per batch bucket (1, 2, 4, ... up to ``max_batch``) and are
allocated once (``runtime/buffers.py``); padding rows have ``seq_lens`` 0 and
the scratch block, and results are sliced to the real batch.  When the fast
path cannot run (``runtime/fallback.py`` says why) the step runs the
families' torch semantics (eager) with the same ``model_forward``; both paths
give identical results.

Backend ``"cuda"`` captures each bucket once (``runtime/device.py``); ``step``
copies the inputs into the bucket's buffers and replays, waiting on an
optional ``ready_event`` (the draft stream's event) without synchronizing the
host.  Its result tensors are views of the persistent buffers, valid until
the next step.  The host fields are packed into a staging buffer and go to
pinned buffers as one copy on a side copy stream (``runtime/host_mirror.py``),
which the next step never waits for; ``host_result(steps_back=1)`` reads the step
before the latest one, which an engine that enqueues step ``i`` before
consuming step ``i - 1`` finds already complete.  Engines whose producers
write straight into the persistent buffers use ``buffers(batch)`` and
``step_in_place(batch, ...)``, which skips the input copies.

The graph also checks its own domain on the device (``runtime/device_guard.py``:
the host's guard expressions over the buffers' true ``seq_lens``, allocated
block entries, accepted counts in range), on a side stream beside the target
forward, or, with a prologue whose head work runs beside it, on that side
stream after the head work, in the draft's shadow.  Its flag travels with the host copy; when a copy that has completed
shows it set, the next step runs eager (``device_guard_trip``) and
``stats()["device_guard"]`` counts the conditions that failed.  On the CPU
the flag is read directly, so the very next step sees it.

``side_streams=False`` keeps a captured step on one stream: the device
guard's checks and the hoisted head work run in line, and on CUDA the step's
last kernels write the host fields straight into mapped pinned memory
(``HostMirror(mapped=True)``; elsewhere the host copies go on the step's
stream), so the graph is a single chain of nodes with no fork, join, event
wait or copy node.  The checks and the head then sit on the step's critical
path; it is a switch, not the default.  ``mapped_mirror=True`` writes the host
fields through mapped memory with side streams too (no copy stream, no event
wait node; ``False`` copies them on one stream as well).  On an H100 that left
TPOT where it was and made the profiled verify->draft gap 60-71 us against 7,
so with side streams the copy is the default.

``prologue`` (optional, a ``Prologue``) is work that belongs at the head of
every step: an engine passes its draft, which writes this step's inputs
(``draft_tokens``; its ``setup`` carries the previous step's
``next_seq_lens`` / ``next_last_token`` into ``seq_lens`` / ``last_tokens``)
into ``buffers(batch)``.  The captured graph then runs the draft, the head
updates, the target forward and the tail as one replay, so no graph switch
or cross-stream wait sits between the last draft kernel and the head; the
head's work that does not read what the draft writes (the metadata and
attention-tiling updates, split out of a composite head) runs on a side
stream beside the draft (``step_plan.hoist_split``), so only the token
update stands between the last draft kernel and the target forward.  On the
fallback path the prologue runs eagerly first.  Only ``step_in_place`` takes
a prologue (``step`` copies its inputs in).

A hybrid target (``caps.has_linear_state``: linear-attention layers) runs
the ``draft-to-verify-linear`` plan, whose head also writes the linear
state's ``state_read_slot`` / ``state_write_slots`` from the previous step's
``accepted`` and the sequences' ``state_slots`` (``docs/kernels.md``); the
eager path reads the same committed slot.

Backend ``"npu"`` is the same sequence over ``torch_npu`` streams, events and
``torch.npu.NPUGraph`` capture; it has not been run on Ascend hardware.
``kernels="torch"`` runs the families' torch semantics inside the captured
graph instead of the built variants (for devices whose built variants cannot
be launched yet, and as a control in measurements); ``kernels="built"`` (the
default) needs every variant built.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Mapping

import torch

from ..specializations.plan import SAMPLED_TAILS, VERIFY_TO_DRAFT, PlanStep
from . import buffers as sb
from . import fallback
from .buffers import GUARD_STATE, INPUTS, alloc_step_buffers, bucket_of, buckets_for
from .capabilities import SpeculativeVerifyCapabilities
from .device import BucketGraphs, DeviceAPI
from .device_guard import DeviceGuard, DeviceGuardSpec, guard_kernel
from .fallback import FALLBACK_REASONS, FastPathUnavailable, fallback_reason, unavailable_message
from .fallback import seq_len_bounds as bounds_of
from .host_mirror import HOST_FIELDS, HostMirror, HostResult
from .library import KernelLibrary
from .step_plan import DEFAULT_SEQUENCE, KERNEL_SOURCES, resolve_step_plan, semantics_call
from .step_records import RESULT_FIELDS, Prologue, StepResult
from .verify_capture import StepCapture
from .verify_host import HostSide

__all__ = [
    "BACKENDS",
    "DeviceAPI",
    "DEFAULT_SEQUENCE",
    "FALLBACK_REASONS",
    "FastPathUnavailable",
    "HOST_FIELDS",
    "HostResult",
    "Prologue",
    "SpecVerifyRuntime",
    "StepResult",
    "alloc_step_buffers",
    "buckets_for",
]

BACKENDS = ("cpu", "cuda", "npu")


class SpecVerifyRuntime(StepCapture, HostSide):
    """Captured (or eager) verify steps for one verify width; see the module docstring."""

    def __init__(
        self,
        library: KernelLibrary,
        model_forward: Callable[[Mapping[str, torch.Tensor]], torch.Tensor],
        caps: SpeculativeVerifyCapabilities,
        width: int,
        max_batch: int = 64,
        backend: str = "cpu",
        device: str | torch.device | None = None,
        *,
        block_table_width: int | None = None,
        block_size: int | None = None,
        scratch_block: int = 0,
        warmup_iters: int = 2,
        kernels: str = "built",
        prologue: Prologue | Callable[[], None] | None = None,
        tail: str = VERIFY_TO_DRAFT,
        epilogue: Callable[[], None] | None = None,
        sampler: Callable[[Mapping[str, torch.Tensor]], None] | None = None,
        allow_eager: bool = False,
        device_guard: bool = True,  # False: no device-side checks (an A/B of their cost; host guards stay)
        side_streams: bool = True,  # False: one stream, the graph a single chain (see the module docstring)
        mapped_mirror: bool | None = None,  # host fields through mapped memory; None: on one stream, on CUDA
    ):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if kernels not in KERNEL_SOURCES:
            raise ValueError(f"kernels must be 'built' or 'torch', got {kernels!r}")
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.library, self.model_forward, self.caps = library, model_forward, caps
        self.width, self.max_batch, self.backend = int(width), int(max_batch), backend
        self.kernels, self.tail, self.epilogue = kernels, tail, epilogue
        self.sampler = sampler  # a sampling tail's vocabulary pass, ``sampler(bufs)`` (``sampling.sample_rows``)
        if (tail in SAMPLED_TAILS.values()) != (sampler is not None):
            raise ValueError(f"tail {tail!r} {'needs' if sampler is None else 'takes no'} sampler")
        self.prologue = Prologue(prologue) if prologue is not None and not isinstance(prologue, Prologue) else prologue
        self._api = DeviceAPI(backend) if backend != "cpu" else None
        self.device = torch.device(device if device is not None else backend)
        if self.device.type != backend:
            raise ValueError(f"backend {backend!r} needs a {backend} device, got {self.device}")
        self.scratch_block = int(scratch_block)
        self.warmup_iters = int(warmup_iters)
        self.buckets = buckets_for(self.max_batch)
        self._fast = 0
        self._fallback: Counter[str] = Counter()
        around = (self.prologue.writes, self.prologue.reads) if self.prologue is not None else None
        plan = self.step_plan = resolve_step_plan(
            library,
            caps,
            self.width,
            self.device.type,
            kernels,
            block_table_width,
            block_size,
            hoist_around=around,
            tail=tail,
        )
        self.eager_only = unavailable_message(caps, plan, self.width, self.device.type, tail, library.root)
        if self.eager_only is not None and not allow_eager:
            raise FastPathUnavailable(self.eager_only + "; pass allow_eager=True to run every step eagerly")
        self._warned = self.eager_only is not None  # every step eager was asked for: nothing to warn about
        self.kv_layout, self.sequence, self.num_splits = plan.kv_layout, plan.steps, plan.num_splits
        self.hoisted = plan.hoisted
        self._bufs: dict[int, dict[str, torch.Tensor]] = {}
        if self.step_plan.unavailable is None and caps.supports_in_graph_input_update:
            for bucket in self.buckets:
                self._bufs[bucket] = alloc_step_buffers(
                    bucket,
                    self.width,
                    self.kv_layout[0],
                    block_size=self.kv_layout[1],
                    scratch_block=self.scratch_block,
                    num_splits=self.num_splits,
                    device=self.device,
                    fill_padding=True,
                )
        self._graphs = BucketGraphs(self._api, self.device, self.warmup_iters) if self._api is not None else None
        self.side_streams = bool(side_streams)
        self._mirror = (
            HostMirror(
                self._api,
                self.device,
                self.max_batch,
                self.width,
                beside=self.side_streams,
                mapped=(not self.side_streams if mapped_mirror is None else bool(mapped_mirror))
                and self.device.type == "cuda",
            )
            if self._api is not None
            else None
        )
        self._guard = (
            DeviceGuard(
                DeviceGuardSpec.of(plan, self.width, self.scratch_block),
                self.device,
                self._api,
                kernel=guard_kernel(library, self.width, self.kv_layout, self.device) if kernels == "built" else None,
                buffers=self._bufs,
                beside=self.side_streams,
            )
            if self._bufs and device_guard
            else None
        )
        self._guard_reset = 0  # host copies made before the flag was last cleared show a stale flag
        side = self._api is not None and self.hoisted and self.side_streams
        self._hoist_stream = self._api.new_stream(self.device) if side else None
        self._guard_trips: Counter[str] = Counter()

    # ----------------------------------------------------------- decisions
    def _bucket(self, batch: int) -> int:
        return bucket_of(self.buckets, batch)

    def _reason(self, batch: int, block_table: torch.Tensor | None, bounds: tuple[int, int]) -> str | None:
        return fallback_reason(self.caps, self.step_plan, self.buckets, batch, block_table, bounds)

    def _call_kernel(self, step: PlanStep, args: list) -> None:
        if self.kernels == "torch":
            semantics_call(self.kv_layout[1], self.num_splits)(step, args)
        else:
            self.step_plan.kernels[step.name](*args)

    # ----------------------------------------------------------- execution
    def step(
        self,
        last_tokens: torch.Tensor,
        draft_tokens: torch.Tensor,
        seq_lens: torch.Tensor,
        block_table: torch.Tensor,
        seq_len_bounds: tuple[int, int] | None = None,
        ready_event=None,
        *,
        accepted: torch.Tensor | None = None,
        state_slots: torch.Tensor | None = None,
    ) -> StepResult:
        """One verification of ``B`` sequences (see the module docstring); a hybrid target's step also takes
        the previous step's ``accepted[B]`` and ``state_slots[B, W]`` (``model_forward`` reads the slots)."""
        if self.prologue is not None or self.epilogue is not None or self.sampler is not None:
            raise ValueError("step: a runtime with a prologue, an epilogue or a sampler works in place (step_in_place)")
        batch = int(seq_lens.shape[0])
        linear = sb.linear_inputs(self.caps.has_linear_state, batch, self.width, accepted, state_slots)
        sb.check_step_inputs(self.width, last_tokens, draft_tokens, seq_lens, block_table)
        if block_table.device.type == "cpu":  # a device table is the device guard's to check (no sync here)
            self.check_block_table(block_table, seq_lens)
        self._wait_ready(ready_event)
        if batch == 0:
            reason = "empty_batch"  # nothing to launch; the eager path returns empty results
        else:
            reason = self._reason(batch, block_table, self._bounds(seq_lens, seq_len_bounds))
        if self._device_trip() and reason is None:
            reason = "device_guard_trip"
        if reason is None:
            sb.load_inputs(
                self._bufs[self._bucket(batch)],
                batch,
                last_tokens,
                draft_tokens,
                seq_lens,
                block_table,
                scratch_block=self.scratch_block,
                non_blocking=self.backend != "cpu",
                linear=linear,
            )
            result = self._fast_step(batch)
            self._fast += 1
        else:
            eager = self._eager_bufs(batch, last_tokens, draft_tokens, seq_lens, block_table, linear)
            result = StepResult(**{n: eager[n] for n in RESULT_FIELDS}, fast_path=False, reason=reason)
            self._left_fast_path(reason)
        self._copy_to_host(result, batch)
        return result

    def step_in_place(self, batch: int, seq_len_bounds: tuple[int, int], ready_event=None) -> StepResult:
        """``step`` over inputs already in ``buffers(batch)`` (rows ``:batch``); results land there too.

        ``seq_len_bounds`` (the host's bookkeeping of the smallest and largest
        ``seq_lens``) is required: reading the device buffers would synchronize.
        Rows past ``batch`` in the bucket are reset to padding (length 0,
        scratch block) first.
        """
        bufs = self.buffers(batch)
        self._wait_ready(ready_event)
        if batch < bufs["seq_lens"].shape[0]:
            sb.pad_rows(bufs, batch, self.scratch_block)
        if self.backend == "cpu":
            self.check_block_table(bufs["block_table"][:batch], bufs["seq_lens"][:batch])
        reason = self._reason(batch, bufs["block_table"][:batch], self._bounds(bufs["seq_lens"][:0], seq_len_bounds))
        if self._device_trip() and reason is None:
            reason = "device_guard_trip"
        if reason is None:
            result = self._fast_step(batch)
            self._fast += 1
        else:
            if self.prologue is not None:  # the eager step below recomputes the head work itself
                self.prologue()
            linear = (bufs["accepted"][:batch], bufs["state_slots"][:batch]) if self.caps.has_linear_state else None
            sampling = {n: bufs[n][:batch] for n in sb.SAMPLING_INPUTS} if self.sampler is not None else None
            eager = self._eager_bufs(
                batch,
                bufs["last_tokens"][:batch],
                bufs["draft_tokens"][:batch],
                bufs["seq_lens"][:batch],
                bufs["block_table"][:batch],
                linear,
                sampling,
            )
            result = StepResult(**{n: eager[n] for n in RESULT_FIELDS}, fast_path=False, reason=reason)
            self._left_fast_path(reason)
            # the engine reads every buffer of the step (results and the verify rows) in place
            for n, t in eager.items():
                if n not in INPUTS and n not in GUARD_STATE and n in bufs:
                    bufs[n].view(-1)[: t.numel()].copy_(t.view(-1))
            if self.epilogue is not None:
                self.epilogue()
        self._copy_to_host(result, batch)
        return result

    def _bounds(self, seq_lens: torch.Tensor, given: tuple[int, int] | None) -> tuple[int, int]:
        return bounds_of(seq_lens, given, on_host=self.backend == "cpu")

    def _wait_ready(self, ready_event) -> None:
        if self._api is not None and ready_event is not None:
            self._api.current_stream(self.device).wait_event(ready_event)

    def _fast_step(self, batch: int) -> StepResult:
        bucket = self._bucket(batch)
        bufs = self._bufs[bucket]
        if self._api is not None:
            if bucket not in self._graphs:
                self._capture(bucket)
            self._graphs.replay(bucket)
            out = {n: bufs[n][:batch] for n in RESULT_FIELDS}
        else:
            self._sequence(bucket)()
            out = {n: bufs[n][:batch].clone() for n in RESULT_FIELDS}
        return StepResult(**out, fast_path=True, reason=None)

    def check_block_table(self, block_table: torch.Tensor, seq_lens: torch.Tensor | None = None) -> None:
        """Refuse a block table that maps the scratch block (padding rows write there): ``ValueError``.

        With ``seq_lens`` only the entries a step maps (positions below ``S + W``) count; without, every
        entry does (an engine's check of its whole table at set-up).  Reads ``block_table``: call it with
        host tensors, or at set-up; inside the graph the device guard makes the same check.
        """
        bs = self.kv_layout[1] if self.kv_layout is not None else self.caps.block_size
        fallback.refuse_scratch_in_table(block_table, seq_lens, self.width, bs, self.scratch_block)

    def stats(self) -> dict:
        """Steps on the fast path, eager steps by reason, and the device guard's failed conditions by name."""
        return {"fast_path": self._fast, "fallback": dict(self._fallback), "device_guard": dict(self._guard_trips)}
