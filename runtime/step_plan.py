"""The step sequence of a verify graph, resolved from the build's structured plans.

A verify step is the ``draft-to-verify`` plan (the head updates, then the
target forward) followed by the tail of the ``verify-to-draft`` plan (the
steps after its target forward).  Only kernel and forward steps run here;
copies (``d2h_*``) are the host mirror's business.  Plans are read as
``Plan`` records from ``Manifest.plan(boundary, layout)``: no key is parsed.

``resolve_step_plan`` picks the layout (explicit, else the model's if built,
else the first built one for the width) and, for built kernels, the callable
of every kernel step; ``StepPlan.unavailable`` names the fallback reason when
the sequence cannot run.  ``run_steps`` walks a sequence over step buffers; ``eager_step`` runs a
whole step on the families' torch semantics (eager), the fallback path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch

from ..specializations.capabilities import SpeculativeVerifyCapabilities
from ..specializations.families import DEFAULT_NUM_SPLITS, FAMILIES
from ..specializations.plan import DRAFT_TO_VERIFY, TARGET_FORWARD, VERIFY_TO_DRAFT, PlanError, PlanStep
from ..specializations.targets import TARGET_OF_DEVICE
from ..specializations.variants import Layout, VariantSpec
from . import semantics
from .buffers import alloc_step_buffers
from .library import KernelLibrary, VariantNotBuilt

__all__ = ["DEFAULT_SEQUENCE", "KERNEL_SOURCES", "StepPlan", "built_layouts", "eager_step", "eager_steps",
           "resolve_step_plan", "run_steps", "semantics_call"]

# The eager path's sequence (the same order the build's plans capture).
DEFAULT_SEQUENCE = ("spec_verify_token_update", "spec_verify_metadata_update",
                    "spec_verify_attention_tiling_update", TARGET_FORWARD, "greedy_prefix_verify",
                    "prepare_next_draft")
KERNEL_SOURCES = ("built", "torch")

StepCall = Callable[[PlanStep, list], None]


@dataclass(frozen=True)
class StepPlan:
    """What one verify width runs: the layout, the steps and the callables of the built kernels.

    ``layout`` is ``(block_table_width, block_size)`` or None when nothing is
    built for the width; ``unavailable`` is the fallback reason when the
    sequence cannot run (then ``steps`` is empty).
    """

    layout: tuple[int, int] | None = None
    steps: tuple[PlanStep, ...] = ()
    kernels: Mapping[str, object] = field(default_factory=dict)  # step name -> KernelCallable
    num_splits: int = DEFAULT_NUM_SPLITS
    unavailable: str | None = None


def built_layouts(library: KernelLibrary, width: int) -> list[tuple[int, int]]:
    """``(block_table_width, block_size)`` of every int32 draft-to-verify plan the build made for ``width``."""
    return [(lay.block_table_width, lay.block_size) for lay in library.manifest.layouts(DRAFT_TO_VERIFY)
            if lay.width == width and lay.draft_dtype == "int32"]


def _plan_steps(library: KernelLibrary, layout: Layout) -> list[PlanStep] | None:
    """The kernel and forward steps of one verify step at ``layout``; None when a plan is missing."""
    first = library.manifest.plan(DRAFT_TO_VERIFY, layout)
    second = library.manifest.plan(VERIFY_TO_DRAFT, layout)
    if first is None or second is None:
        return None
    try:
        tail = second.after_forward()
    except PlanError:  # the verify-to-draft plan has no target forward
        return None
    return [s for s in (*first.steps, *tail) if s.kind in ("kernel", "forward")]


def resolve_step_plan(library: KernelLibrary, caps: SpeculativeVerifyCapabilities, width: int, device_type: str,
                      kernels: str = "built", block_table_width: int | None = None,
                      block_size: int | None = None) -> StepPlan:
    """The step plan of ``width`` on ``device_type``; see the module docstring."""
    bt, bs = block_table_width, block_size
    if bt is None or bs is None:
        built = built_layouts(library, width)
        want = (caps.block_table_width, caps.block_size)
        if want in built:
            bt, bs = want
        elif built:
            bt, bs = built[0]
        else:
            return StepPlan(unavailable="variant_not_built")
    layout = (int(bt), int(bs))
    steps = _plan_steps(library, Layout(width, *layout))
    if steps is None:
        return StepPlan(layout=layout, unavailable="variant_not_built")
    if kernels == "torch":  # the semantics run in the graph; nothing needs to be built
        return StepPlan(layout=layout, steps=tuple(steps))
    return _bind_kernels(library, width, layout, steps, TARGET_OF_DEVICE[device_type])


def _bind_kernels(library: KernelLibrary, width: int, layout: tuple[int, int], steps: list[PlanStep],
                  target: str) -> StepPlan:
    """The callable of every kernel step for ``target``; ``variant_not_built`` when one is missing."""
    bound, num_splits = {}, DEFAULT_NUM_SPLITS
    try:
        for step in steps:
            if step.kind != "kernel":
                continue
            v = step.variant
            k = library.get(v.family, width, *layout, target=target)
            entry, _ = k.resolve(target, "int32")  # raises VariantNotBuilt when this target lacks it
            bound[step.name] = k
            if FAMILIES[v.family].uses_num_splits:
                num_splits = entry.num_splits or DEFAULT_NUM_SPLITS
    except VariantNotBuilt:
        # a split count read before the missing variant still holds for the eager path
        return StepPlan(layout=layout, num_splits=num_splits, unavailable="variant_not_built")
    return StepPlan(layout=layout, steps=tuple(steps), kernels=bound, num_splits=num_splits)


def eager_steps(width: int, block_table_width: int, block_size: int) -> list[PlanStep]:
    """``DEFAULT_SEQUENCE`` as plan steps at one layout (the eager path needs no build)."""
    layout = Layout(width, block_table_width, block_size)
    return [PlanStep.forward() if f == TARGET_FORWARD else PlanStep.kernel(VariantSpec.of(f, layout))
            for f in DEFAULT_SEQUENCE]


def semantics_call(block_size: int, num_splits: int) -> StepCall:
    """A step call that runs the family's torch semantics (``runtime/semantics.py``)."""
    def call(step: PlanStep, args: list) -> None:
        family = step.variant.family
        semantics.REFERENCES[family](*args, **semantics.reference_kwargs(family, block_size, num_splits))
    return call


def run_steps(bufs: Mapping[str, torch.Tensor], steps, model_forward: Callable, call: StepCall,
              after_forward: Callable[[], None] | None = None) -> None:
    """Each step in order over ``bufs``: the forward writes ``target_tokens``, a kernel step goes to ``call``.

    ``after_forward()`` runs right after the forward (the verify graph joins
    its device guard's side stream there).
    """
    for step in steps:
        if step.kind == "forward":
            out = model_forward(bufs)
            bufs["target_tokens"].copy_(out.reshape(bufs["target_tokens"].shape))
            if after_forward is not None:
                after_forward()
        else:
            call(step, [bufs[a.name] for a in FAMILIES[step.variant.family].args])


def eager_step(model_forward: Callable, width: int, block_size: int, num_splits: int, last_tokens: torch.Tensor,
               draft_tokens: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor, *,
               scratch_block: int = 0, device=None) -> dict[str, torch.Tensor]:
    """One verify step on the families' torch semantics (eager) in fresh buffers; returns all of them.

    The layout is the caller's (``block_table``'s width, ``block_size``), so
    it needs no build.
    """
    batch, bt = int(seq_lens.shape[0]), int(block_table.shape[1])
    bufs = alloc_step_buffers(batch, width, bt, block_size=block_size, scratch_block=scratch_block,
                              num_splits=num_splits, device=device)
    bufs["last_tokens"].copy_(last_tokens)
    bufs["draft_tokens"].copy_(draft_tokens)
    bufs["seq_lens"].copy_(seq_lens)
    bufs["block_table"].copy_(block_table)
    if batch:
        run_steps(bufs, eager_steps(width, bt, block_size), model_forward, semantics_call(block_size, num_splits))
    return bufs
