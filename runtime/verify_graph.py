"""One speculative-verify step as a fixed sequence over persistent buffers.

The sequence is the build's boundary plans: the draft-to-verify graph ops
(token, metadata and attention-tiling updates, then ``target_forward``)
followed by the verify-to-draft ops after ``target_forward``
(``greedy_prefix_verify``, ``prepare_next_draft``).  Each kernel op calls the
built variant; ``target_forward`` calls the engine's
``model_forward(bufs) -> target_tokens[B, W]``, which reads the persistent
buffers (``tokens``, ``positions``, ``slot_mapping``, ``kv_lens``,
``query_start_loc``, ``block_table``, the ``row_*`` tiling fields, ...).
``d2h_*`` ops are not part of the sequence: results for the host are copied
after it.

    rt = SpecVerifyRuntime(lib, model_forward, capabilities_of(model), width=4)
    res = rt.step(last_tokens, draft_tokens, seq_lens, block_table, seq_len_bounds=(lo, hi))
    rt.stats()  # {"fast_path": n, "fallback": {"guard_failed": k, ...}}

Buffers exist per batch bucket (1, 2, 4, ... up to ``max_batch``) and are
allocated once.  Padding rows of a bucket have ``seq_lens`` 0 and a block
table filled with the scratch block, so their writes only reach the scratch
block; results are sliced to the real batch.

The fast path runs only when the model supports in-graph input updates,
every variant of the sequence is built for the device's target, the batch
fits a bucket, the model's block layout equals the variant's, and every
guard of every variant holds for the step's sequence-length bounds.
Otherwise the step runs the eager torch references (``codegen.reference``)
with the same ``model_forward`` and the reason is counted; both paths give
identical results.

Backend ``"cuda"`` captures each bucket once with ``torch.cuda.graph``
(after a warm-up on a side stream); ``step`` copies the inputs into the
bucket's buffers and replays, waiting on an optional ``ready_event`` (the
draft stream's event) without synchronizing the host.  Its result tensors
are views of the persistent buffers, valid until the next step.  The host
copy of the results (``accepted``, ``next_tokens``, ``next_last_token``,
``next_seq_lens``) goes to pinned buffers with ``non_blocking`` copies and an
event on a side copy stream, so the copies stay off the critical path; the
next step's replay waits on them on the device.  ``host_result(steps_back=1)``
reads the step before the latest one, which an engine that enqueues step
``i`` before consuming step ``i - 1`` (reference 004's one-step-late read)
finds already complete; a result stays readable until two later steps are
enqueued.

Engines whose producers write straight into the persistent buffers (the
draft graph writing ``draft_tokens``, ``last_tokens`` and ``seq_lens`` of the
next step) use ``buffers(batch)`` and ``step_in_place(batch, ...)``, which
skips the input copies.

Backend ``"npu"`` is the same sequence over ``torch_npu``: ``torch.npu``
streams, events and ``torch.npu.NPUGraph`` capture (``torch.npu.graph``).  It
has not been run on Ascend hardware.  ``kernels="torch"`` runs the families'
torch references inside the captured graph instead of the built variants
(for devices whose built variants cannot be launched yet, and as a control in
measurements); ``kernels="built"`` (the default) needs every variant built.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

from ..specializations.families import DEFAULT_NUM_SPLITS, FAMILIES, shape_of
from ..specializations.plan import DRAFT_TO_VERIFY, TARGET_FORWARD, VERIFY_TO_DRAFT, PlanError, PlanStep
from ..specializations.targets import TARGET_OF_DEVICE
from ..specializations.variants import Layout, VariantSpec
from . import semantics as reference
from .capabilities import SpeculativeVerifyCapabilities
from .buffers import alloc_step_buffers, buckets_for
from .device import DeviceAPI
from .library import KernelLibrary, VariantNotBuilt

__all__ = ["BACKENDS", "DeviceAPI", "DEFAULT_SEQUENCE", "FALLBACK_REASONS", "HostResult", "SpecVerifyRuntime", "StepResult",
           "alloc_step_buffers", "buckets_for"]

BACKENDS = ("cpu", "cuda", "npu")

FALLBACK_REASONS = ("capability_off", "variant_not_built", "layout_mismatch", "batch_exceeds_buckets", "empty_batch",
                    "guard_failed")
# The eager path's sequence (the same order the build's plans capture).
DEFAULT_SEQUENCE = ("spec_verify_token_update", "spec_verify_metadata_update",
                    "spec_verify_attention_tiling_update", TARGET_FORWARD, "greedy_prefix_verify",
                    "prepare_next_draft")
RESULT_FIELDS = ("accepted", "next_tokens", "next_last_token", "next_seq_lens", "draft_positions",
                 "draft_slots", "hidden_rows")
HOST_FIELDS = ("accepted", "next_tokens", "next_last_token", "next_seq_lens")
_INPUTS = ("last_tokens", "draft_tokens", "seq_lens", "block_table", "scratch_slot")
I32 = torch.int32


@dataclass(frozen=True)
class StepResult:
    accepted: torch.Tensor         # [B]
    next_tokens: torch.Tensor      # [B, W]
    next_last_token: torch.Tensor  # [B]
    next_seq_lens: torch.Tensor    # [B]
    draft_positions: torch.Tensor  # [B, 2]
    draft_slots: torch.Tensor      # [B, 2]
    hidden_rows: torch.Tensor      # [B, 2]
    fast_path: bool = False
    reason: str | None = None      # the fallback reason, None on the fast path


@dataclass(frozen=True)
class HostResult:
    accepted: torch.Tensor
    next_tokens: torch.Tensor
    next_last_token: torch.Tensor
    next_seq_lens: torch.Tensor


class SpecVerifyRuntime:
    """Captured (or eager) verify steps for one verify width; see the module docstring."""

    def __init__(self, library: KernelLibrary, model_forward: Callable[[Mapping[str, torch.Tensor]], torch.Tensor],
                 caps: SpeculativeVerifyCapabilities, width: int, max_batch: int = 64, backend: str = "cpu",
                 device: str | torch.device | None = None, *, block_table_width: int | None = None,
                 block_size: int | None = None, scratch_block: int = 0, warmup_iters: int = 2,
                 kernels: str = "built"):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if kernels not in ("built", "torch"):
            raise ValueError(f"kernels must be 'built' or 'torch', got {kernels!r}")
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.library, self.model_forward, self.caps = library, model_forward, caps
        self.width, self.max_batch, self.backend = int(width), int(max_batch), backend
        self.kernels = kernels
        self._api = DeviceAPI(backend) if backend != "cpu" else None
        self.device = torch.device(device if device is not None else backend)
        if self.device.type != backend:
            raise ValueError(f"backend {backend!r} needs a {backend} device, got {self.device}")
        self.scratch_block = int(scratch_block)
        self.warmup_iters = int(warmup_iters)
        self.buckets = buckets_for(self.max_batch)
        self._fast = 0
        self._fallback: Counter[str] = Counter()
        # The variant layout: explicit, else the model's if built, else the first built for this width.
        self.layout, self.sequence, self._kernels = None, (), {}
        self.num_splits = DEFAULT_NUM_SPLITS
        self._unavailable: str | None = None
        self._resolve(block_table_width, block_size)
        self._bufs: dict[int, dict[str, torch.Tensor]] = {}
        self._graphs: dict[int, "torch.cuda.CUDAGraph"] = {}
        self._pool = None
        self._host: list[dict[str, torch.Tensor]] = []
        self._host_events: list = []
        self._host_turn = 0
        self._host_steps: list[tuple[int, int]] = []  # (slot, batch) of the latest two steps, newest last
        self._copy_stream = None
        self._copy_done = None
        if self._unavailable is None and caps.supports_in_graph_input_update:
            for bucket in self.buckets:
                self._bufs[bucket] = self._alloc(bucket, self.layout[0], fill_padding=True)
        if self._api is not None:
            pin = True
            self._copy_stream = self._api.new_stream(self.device)
            for _ in range(2):  # double-buffered so a step in flight never overwrites what the host reads
                self._host.append({
                    "accepted": torch.empty(self.max_batch, dtype=I32, pin_memory=pin),
                    "next_tokens": torch.empty(self.max_batch, self.width, dtype=I32, pin_memory=pin),
                    "next_last_token": torch.empty(self.max_batch, dtype=I32, pin_memory=pin),
                    "next_seq_lens": torch.empty(self.max_batch, dtype=I32, pin_memory=pin),
                })
                self._host_events.append(self._api.event())

    # ----------------------------------------------------------------- setup
    def _layouts_built(self) -> list[tuple[int, int]]:
        return [(lay.block_table_width, lay.block_size) for lay in self.library.manifest.layouts(DRAFT_TO_VERIFY)
                if lay.width == self.width and lay.draft_dtype == "int32"]

    def _resolve(self, bt: int | None, bs: int | None) -> None:
        if bt is None or bs is None:
            built = self._layouts_built()
            want = (self.caps.block_table_width, self.caps.block_size)
            if want in built:
                bt, bs = want
            elif built:
                bt, bs = built[0]
            else:
                self._unavailable = "variant_not_built"
                return
        self.layout = (int(bt), int(bs))
        layout = Layout(self.width, int(bt), int(bs))
        first = self.library.manifest.plan(DRAFT_TO_VERIFY, layout)
        second = self.library.manifest.plan(VERIFY_TO_DRAFT, layout)
        try:
            steps = [s for s in (*first.steps, *second.after_forward()) if s.kind in ("kernel", "forward")]
        except (AttributeError, PlanError):  # a plan is missing, or has no target forward
            self._unavailable = "variant_not_built"
            return
        target = TARGET_OF_DEVICE[self.device.type]
        if self.kernels == "torch":  # the references run in the graph; nothing needs to be built
            self.sequence = tuple(steps)
            return
        try:
            for step in steps:
                if step.kind != "kernel":
                    continue
                v = step.variant
                k = self.library.get(v.family, self.width, bt, bs, target=target)
                entry, _ = k.resolve(target, "int32")  # raises VariantNotBuilt when this target lacks it
                self._kernels[step.name] = k
                if FAMILIES[v.family].uses_num_splits:
                    self.num_splits = entry.num_splits or DEFAULT_NUM_SPLITS
        except VariantNotBuilt:
            self._unavailable, self._kernels = "variant_not_built", {}
            return
        self.sequence = tuple(steps)

    def _alloc(self, batch: int, bt: int, fill_padding: bool = False) -> dict[str, torch.Tensor]:
        """Every buffer of the step for ``batch`` rows, int32, on the runtime's device."""
        bs = self.layout[1] if self.layout else self.caps.block_size
        return alloc_step_buffers(batch, self.width, bt, block_size=bs, scratch_block=self.scratch_block,
                                  num_splits=self.num_splits, device=self.device, fill_padding=fill_padding)

    # ----------------------------------------------------------- execution
    def _run(self, bufs: Mapping[str, torch.Tensor], steps, call: Callable[[PlanStep, list], None]) -> None:
        for step in steps:
            if step.kind == "forward":
                out = self.model_forward(bufs)
                bufs["target_tokens"].copy_(out.reshape(bufs["target_tokens"].shape))
            else:
                args = [bufs[a.name] for a in FAMILIES[step.variant.family].args]
                call(step, args)

    def _call_kernel(self, step: PlanStep, args: list) -> None:
        if self.kernels == "torch":
            self._reference_call(self.layout[1])(step, args)
        else:
            self._kernels[step.name](*args)

    def _reference_call(self, block_size: int):
        def call(step: PlanStep, args: list) -> None:
            family = step.variant.family
            reference.REFERENCES[family](*args, **reference.reference_kwargs(family, block_size, self.num_splits))
        return call

    def _reason(self, batch: int, block_table: torch.Tensor, bounds: tuple[int, int]) -> str | None:
        if not self.caps.supports_in_graph_input_update:
            return "capability_off"
        if self._unavailable is not None:
            return self._unavailable
        bt, bs = self.layout
        if (self.caps.block_size, self.caps.block_table_width) != (bs, bt) or \
                (block_table is not None and block_table.shape[1] != bt):
            return "layout_mismatch"
        if batch > self.max_batch:
            return "batch_exceeds_buckets"
        bucket = self._bucket(batch)
        lo, hi = bounds
        for k in self._kernels.values():
            if not k.check_guards(min_seq_len=lo, max_seq_len=hi, batch=bucket):
                return "guard_failed"
        return None

    def _bucket(self, batch: int) -> int:
        return next(b for b in self.buckets if b >= batch)

    def _bounds(self, seq_lens: torch.Tensor, given: tuple[int, int] | None) -> tuple[int, int]:
        if seq_lens.numel() == 0:
            return given or (0, 0)
        if self.backend == "cpu" or given is None:
            # Cheap on the host; on CUDA without bounds this synchronizes.
            lo, hi = int(seq_lens.min()), int(seq_lens.max())
            if given is not None:
                lo, hi = min(lo, int(given[0])), max(hi, int(given[1]))
            return lo, hi
        return int(given[0]), int(given[1])

    def _load_inputs(self, bufs, batch, last_tokens, draft_tokens, seq_lens, block_table) -> None:
        nb = self.backend != "cpu"
        bufs["last_tokens"][:batch].copy_(last_tokens, non_blocking=nb)
        bufs["draft_tokens"][:batch].copy_(draft_tokens, non_blocking=nb)
        bufs["seq_lens"][:batch].copy_(seq_lens, non_blocking=nb)
        bufs["block_table"][:batch].copy_(block_table, non_blocking=nb)
        if batch < bufs["seq_lens"].shape[0]:  # padding rows: length 0, every block the scratch block
            self._pad(bufs, batch)

    def _capture(self, bucket: int) -> None:
        bufs = self._bufs[bucket]
        if self._pool is None:
            self._pool = self._api.pool_handle()
        self._graphs[bucket] = self._api.capture(lambda: self._run(bufs, self.sequence, self._call_kernel),
                                                 self.device, self._pool, self.warmup_iters)

    def capture(self, batch: int) -> None:
        """Capture ``batch``'s bucket now (CUDA / NPU), over what its buffers hold."""
        if self._api is not None and self._bufs and 1 <= batch <= self.max_batch:
            bucket = self._bucket(batch)
            if bucket not in self._graphs:
                self._capture(bucket)

    def capture_all(self) -> None:
        """Capture every bucket now (CUDA / NPU) instead of on its first step."""
        if self._api is not None and self.caps.supports_in_graph_input_update and self._unavailable is None:
            for bucket in self.buckets:
                if bucket not in self._graphs:
                    self._capture(bucket)

    def buffers(self, batch: int) -> dict[str, torch.Tensor]:
        """The persistent buffers of ``batch``'s bucket (stable addresses), for ``step_in_place``.

        Raises ``LookupError`` when the fast path has no buffers (capability
        off, variants not built, or ``batch`` beyond the buckets).
        """
        if not self._bufs or not 1 <= batch <= self.max_batch:
            raise LookupError(f"no persistent buffers for batch {batch}: "
                              f"{self._reason(batch, None, (0, 0)) or 'batch out of range'}")
        return self._bufs[self._bucket(batch)]

    def step(self, last_tokens: torch.Tensor, draft_tokens: torch.Tensor, seq_lens: torch.Tensor,
             block_table: torch.Tensor, seq_len_bounds: tuple[int, int] | None = None,
             ready_event=None) -> StepResult:
        """One verification of ``B`` sequences; see the module docstring."""
        batch = int(seq_lens.shape[0])
        if draft_tokens.shape != (batch, self.width - 1) or last_tokens.shape != (batch,) \
                or block_table.dim() != 2 or block_table.shape[0] != batch:
            raise ValueError(f"step: expected last_tokens[B], draft_tokens[B, {self.width - 1}], seq_lens[B], "
                             f"block_table[B, BT]; got {tuple(last_tokens.shape)}, {tuple(draft_tokens.shape)}, "
                             f"{tuple(seq_lens.shape)}, {tuple(block_table.shape)}")
        self._wait_ready(ready_event)
        if batch == 0:
            reason = "empty_batch"  # nothing to launch; the eager path returns empty results
        else:
            reason = self._reason(batch, block_table, self._bounds(seq_lens, seq_len_bounds))
        if reason is None:
            bufs = self._bufs[self._bucket(batch)]
            self._load_inputs(bufs, batch, last_tokens, draft_tokens, seq_lens, block_table)
            result = self._fast_step(batch)
            self._fast += 1
        else:
            result = self._eager_step(batch, last_tokens, draft_tokens, seq_lens, block_table, reason)
            self._fallback[reason] += 1
        if self._api is not None:
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
            self._wait_host_copy()
            self._pad(bufs, batch)
        reason = self._reason(batch, bufs["block_table"][:batch], self._bounds(bufs["seq_lens"][:0], seq_len_bounds))
        if reason is None:
            result = self._fast_step(batch)
            self._fast += 1
        else:
            eager = self._eager_bufs(batch, bufs["last_tokens"][:batch], bufs["draft_tokens"][:batch],
                                     bufs["seq_lens"][:batch], bufs["block_table"][:batch])
            result = StepResult(**{n: eager[n] for n in RESULT_FIELDS}, fast_path=False, reason=reason)
            self._fallback[reason] += 1
            # the engine reads every buffer of the step (results and the verify rows) in place; the
            # previous step's host copy may still be reading them
            self._wait_host_copy()
            for n, t in eager.items():
                if n not in _INPUTS and n in bufs:
                    bufs[n].view(-1)[: t.numel()].copy_(t.view(-1))
        if self._api is not None:
            self._copy_to_host(result, batch)
        return result

    def _wait_host_copy(self) -> None:
        """Order the next writes to the persistent buffers after the latest host copy that reads them."""
        if self._api is not None and self._host_steps:
            self._api.current_stream(self.device).wait_event(self._host_events[self._host_steps[-1][0]])

    def _pad(self, bufs, batch: int) -> None:
        bufs["last_tokens"][batch:].fill_(0)
        bufs["draft_tokens"][batch:].fill_(0)
        bufs["seq_lens"][batch:].fill_(0)
        bufs["block_table"][batch:].fill_(self.scratch_block)

    def _wait_ready(self, ready_event) -> None:
        if self._api is not None and ready_event is not None:
            self._api.current_stream(self.device).wait_event(ready_event)

    def _fast_step(self, batch: int) -> StepResult:
        bucket = self._bucket(batch)
        bufs = self._bufs[bucket]
        if self._api is not None:
            if bucket not in self._graphs:
                self._capture(bucket)
            self._wait_host_copy()  # the previous step's host copy reads these buffers
            self._graphs[bucket].replay()
            out = {n: bufs[n][:batch] for n in RESULT_FIELDS}
        else:
            self._run(bufs, self.sequence, self._call_kernel)
            out = {n: bufs[n][:batch].clone() for n in RESULT_FIELDS}
        return StepResult(**out, fast_path=True, reason=None)

    def _eager_step(self, batch, last_tokens, draft_tokens, seq_lens, block_table, reason) -> StepResult:
        bufs = self._eager_bufs(batch, last_tokens, draft_tokens, seq_lens, block_table)
        return StepResult(**{n: bufs[n] for n in RESULT_FIELDS}, fast_path=False, reason=reason)

    def _eager_bufs(self, batch, last_tokens, draft_tokens, seq_lens, block_table) -> dict[str, torch.Tensor]:
        """The step on the torch references in fresh buffers; returns all of them."""
        bs = self.caps.block_size  # the model's cache layout is the truth on the eager path
        saved_layout = self.layout
        self.layout = (int(block_table.shape[1]), bs)
        try:
            bufs = self._alloc(batch, int(block_table.shape[1]))
        finally:
            self.layout = saved_layout
        bufs["last_tokens"].copy_(last_tokens)
        bufs["draft_tokens"].copy_(draft_tokens)
        bufs["seq_lens"].copy_(seq_lens)
        bufs["block_table"].copy_(block_table)
        if batch:
            layout = Layout(self.width, int(block_table.shape[1]), bs)
            steps = [PlanStep.forward() if f == TARGET_FORWARD else PlanStep.kernel(VariantSpec.of(f, layout))
                     for f in DEFAULT_SEQUENCE]
            self._run(bufs, steps, self._reference_call(bs))
        return bufs

    def _copy_to_host(self, result: StepResult, batch: int) -> None:
        """Non-blocking copies of the host fields on the copy stream, then that slot's event."""
        slot = self._host_turn
        self._host_turn ^= 1
        host, copy = self._host[slot], self._copy_stream
        copy.wait_stream(self._api.current_stream(self.device))
        with self._api.stream(copy):
            for n in HOST_FIELDS:
                src = getattr(result, n)
                if not result.fast_path:
                    src.record_stream(copy)  # a fresh tensor: keep its memory until the copy ran
                host[n][:batch].copy_(src, non_blocking=True)
            self._host_events[slot].record(copy)
        self._host_steps = (self._host_steps + [(slot, batch)])[-2:]

    def host_result(self, steps_back: int = 0) -> HostResult | None:
        """The host copy of the latest (``steps_back=0``) or the previous (1) step's results.

        Waits on that step's copy event only; None when no such step ran.
        """
        if steps_back not in (0, 1):
            raise ValueError("steps_back must be 0 (latest step) or 1 (the one before)")
        if len(self._host_steps) <= steps_back:
            return None
        slot, batch = self._host_steps[-1 - steps_back]
        self._host_events[slot].synchronize()
        host = self._host[slot]
        return HostResult(**{n: host[n][:batch] for n in HOST_FIELDS})

    def last_host_result(self) -> HostResult | None:
        """``host_result(0)``: the latest step's results on the host (waits on its copy event)."""
        return self.host_result(0)

    def stats(self) -> dict:
        return {"fast_path": self._fast, "fallback": dict(self._fallback)}
