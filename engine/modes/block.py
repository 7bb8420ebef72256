"""The three boundary modes of a block-draft engine (DFlash, DSpark), registered by name.

They share the target forward with taps and the draft graph; each crosses
draft->verify, verification, the context-K/V update and the next block's
inputs its own way:

* ``baseline`` (reference 003's eager path): the host synchronizes, builds
  the verify inputs, and after verification synchronizes again, runs the
  acceptance, builds the context rows of every sequence (stopping at its
  first rejection), uploads them and writes their context K/V; the next
  block's inputs are built on the host.  Two host synchronizations per step.
* ``compile``: the same updates (the families' torch semantics) under
  ``torch.compile`` with the target forward and the context projection in
  one captured graph; the acceptance is read back once per step.
* ``specgen``: the build's plans in one captured graph: ``draft-to-verify``
  (the head update, the target forward) then the tail of ``context-kv``
  (``greedy_prefix_verify``, ``context_kv_update``), then the context
  projection and the next block's inputs; no host synchronization, the host
  reads each step's tokens one step late.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

import torch

from ...models.errors import EngineError
from ...runtime import semantics
from ...runtime.buffers import alloc_step_buffers
from ...runtime.device import DeviceAPI
from ...runtime.host_mirror import HOST_FIELDS, HostMirror
from ...runtime.library import VariantNotBuilt
from ...runtime.step_plan import run_steps, semantics_call
from ...specializations.families import DEFAULT_NUM_SPLITS
from ...specializations.plan import CONTEXT_KV, DRAFT_TO_VERIFY
from ...specializations.targets import TARGET_OF_DEVICE
from ...specializations.variants import Layout
from ..graphs import compiled_updates
from .base import BaselineMode, Commit, CompileMode, Mode

__all__ = ["BLOCK_BOUNDARIES", "BLOCK_MODES", "build_command", "register_block_mode"]

I32 = torch.int32
BLOCK_BOUNDARIES = (DRAFT_TO_VERIFY, CONTEXT_KV)
BLOCK_MODES: dict[str, type[Mode]] = {}


def register_block_mode(cls: type[Mode]) -> type[Mode]:
    if not cls.name or cls.name in BLOCK_MODES:
        raise EngineError(f"block mode name {cls.name!r} is empty or taken")
    BLOCK_MODES[cls.name] = cls
    return cls


def build_command(widths, block_table_width: int, block_size: int, target: str = "c") -> str:
    """The ``specgen build`` command that makes a block draft's variants."""
    return (
        f"specgen build --target {target} --boundary {','.join(BLOCK_BOUNDARIES)} --widths "
        f"{','.join(str(w) for w in widths)} --block-table-widths {block_table_width} "
        f"--block-sizes {block_size} --draft-dtypes int32"
    )


def block_tail(b: dict, block_size: int) -> None:
    """Acceptance, context slots and the next block's inputs as plain torch over step buffers."""
    semantics.run_reference("greedy_prefix_verify", b, block_size=block_size)
    semantics.run_reference("context_kv_update", b, block_size=block_size)
    b["next_last_token"].copy_(b["target_tokens"].gather(1, b["accepted"].long()[:, None]).squeeze(1))
    b["next_seq_lens"].copy_(b["seq_lens"] + b["accepted"] + 1)


@register_block_mode
class BlockBaselineMode(BaselineMode):
    """Host-serial, as reference 003's eager path: compact context rows built and uploaded by the host."""

    name = "baseline"
    DRAFT_INPUTS = ("accepted", "next_last_token", "next_seq_lens")

    def _boundary_out(self) -> Commit:
        e, h, bufs = self.engine, self.h_bufs, self.engine.bufs
        h["target_tokens"].copy_(bufs["target_tokens"].cpu())  # synchronizes
        semantics.run_reference("greedy_prefix_verify", h, block_size=e.block_size)
        acc, seq = h["accepted"].tolist(), h["seq_lens"].tolist()
        # the context rows, sequence by sequence, up to the first rejection; every other row writes nothing
        slots = torch.full((e.batch * e.width,), -1, dtype=I32)
        for b, (a, s) in enumerate(zip(acc, seq)):
            pos = torch.arange(s, s + a + 1)
            slots[b * e.width : b * e.width + a + 1] = semantics.slot(
                h["block_table"][b : b + 1], pos[None], e.block_size
            ).reshape(-1)
        bufs["context_slots"].copy_(slots.pin_memory() if e.device.type == "cuda" else slots, non_blocking=True)
        # the projection runs over every verify row: a GEMM row's bits depend on the row count
        e.context_write()
        a = h["accepted"].long()
        h["next_last_token"].copy_(h["target_tokens"].gather(1, a[:, None]).squeeze(1))
        h["next_seq_lens"].copy_(h["seq_lens"] + h["accepted"] + 1)
        for n in self.DRAFT_INPUTS:
            bufs[n].copy_(h[n], non_blocking=True)
        self.h_last, self.h_seq = h["next_last_token"].clone(), h["next_seq_lens"].clone()
        return h["accepted"].clone(), h["next_tokens"].clone()


@register_block_mode
class BlockCompileMode(CompileMode):
    """``torch.compile``'d updates, target forward and context projection in one graph; one read-back sync."""

    name = "compile"
    _TAILS: dict[str, Callable] = {}

    def capture(self) -> None:
        e = self.engine
        head, _ = compiled_updates(e.compile_backend)
        if e.compile_backend not in self._TAILS:
            self._TAILS[e.compile_backend] = torch.compile(
                block_tail, backend=e.compile_backend, fullgraph=True, dynamic=False
            )
        tail, bufs, bs = self._TAILS[e.compile_backend], e.bufs, e.block_size

        def verify():
            head(bufs, bs)
            e.forward_only()
            tail(bufs, bs)
            e.context_write()

        self.verify_graph = e.graph(verify)


@register_block_mode
class BlockSpecgenMode(Mode):
    """The build's ``draft-to-verify`` and ``context-kv`` plans in one captured graph; no host sync."""

    name = "specgen"
    needs_library = True

    def buffers(self) -> dict[str, torch.Tensor]:
        e = self.engine
        self.steps, self.kernels = self._resolve()
        self._fast, self._fallback = 0, {}
        self.mirror = HostMirror(DeviceAPI("cuda"), e.device, e.batch, e.width) if e.device.type == "cuda" else None
        return alloc_step_buffers(
            e.batch,
            e.width,
            e.block_table_width,
            block_size=e.block_size,
            scratch_block=e.scratch_block,
            device=e.device,
        )

    def _resolve(self):
        """The plan steps (head update, forward, then the context-kv tail) and their built kernels."""
        e = self.engine
        layout = Layout(e.width, e.block_table_width, e.block_size)
        target = TARGET_OF_DEVICE[e.device.type]
        cmd = build_command([e.width], e.block_table_width, e.block_size, target)
        head = e.library.manifest.plan(DRAFT_TO_VERIFY, layout)
        ctx = e.library.manifest.plan(CONTEXT_KV, layout)
        if head is None or ctx is None:
            raise EngineError(
                f"specgen mode: the build has no {DRAFT_TO_VERIFY} / {CONTEXT_KV} plans for "
                f"depth {e.width - 1} ({layout.key}); run {cmd}"
            )
        steps = tuple(s for s in (*head.steps, *ctx.after_forward()) if s.kind in ("kernel", "forward"))
        kernels = {}
        try:
            for s in steps:
                if s.kind == "kernel":
                    k = e.library.get(s.variant.family, e.width, e.block_table_width, e.block_size, target=target)
                    k.resolve(target, "int32")
                    kernels[s.name] = k
        except (VariantNotBuilt, LookupError) as err:
            raise EngineError(f"specgen mode: {err}; run {cmd}") from None
        return steps, kernels

    def _call(self, step, args) -> None:
        self.kernels[step.name](*args)

    def _sequence(self, call) -> None:
        e = self.engine
        run_steps(e.bufs, self.steps, e.target_forward, call)
        e.context_write()
        e.next_block_inputs()

    def capture(self) -> None:
        self.verify_graph = self.engine.graph(lambda: self._sequence(self._call))

    @property
    def lagged(self) -> bool:
        return self.engine.device.type != "cpu"

    def _guard_failure(self, lo: int, hi: int) -> str | None:
        for k in self.kernels.values():
            if not k.check_guards(min_seq_len=lo, max_seq_len=hi, batch=self.engine.batch):
                return "guard_failed"
        return None

    def verify(self, lo: int, hi: int, mark: Callable[[], None]) -> Commit | None:
        e, bufs = self.engine, self.engine.bufs
        reason = self._guard_failure(lo, hi)
        if reason is None:
            self.verify_graph()
            self._fast += 1
        else:  # the families' torch semantics, eagerly, over the same buffers
            self._sequence(semantics_call(e.block_size, DEFAULT_NUM_SPLITS))
            self._fallback[reason] = self._fallback.get(reason, 0) + 1
        mark()
        if self.mirror is None:
            return bufs["accepted"].clone(), bufs["next_tokens"].clone()
        self.mirror.copy(SimpleNamespace(**{n: bufs[n] for n in HOST_FIELDS}, fast_path=True), e.batch)
        return None

    def read_back(self, steps_back: int) -> Commit:
        host = self.mirror.result(steps_back)
        return host.accepted.clone(), host.next_tokens.clone()

    def stats(self) -> dict | None:
        return {
            "fast_path": self._fast,
            "fallback": dict(self._fallback),
            "graph": [s.name for s in self.steps] + ["context_kv_projection", "next_block_inputs"],
        }

    def close(self) -> None:
        self.verify_graph = self.mirror = None
