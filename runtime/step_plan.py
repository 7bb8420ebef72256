"""The step sequence of a verify graph, resolved from the build's structured plans.

A verify step is the ``draft-to-verify`` plan (the head updates, then the
target forward) followed by the tail of a second plan: the steps after its
target forward.  The tail is ``verify-to-draft``'s for a chain draft (MTP:
``greedy_prefix_verify``, ``prepare_next_draft``) and ``context-kv``'s for a
block draft (DFlash / DSpark: ``greedy_prefix_verify``, ``prepare_next_block``, ``context_kv_update``);
``TAILS`` lists each tail boundary's families for the eager path.  Only kernel and forward steps run here;
copies (``d2h_*``) are the host mirror's business.  Plans are read as
``Plan`` records from ``Manifest.plan(boundary, layout)``: no key is parsed.

``resolve_step_plan`` picks the layout (explicit, else the model's if built,
else the first built one for the width) and, for built kernels, the callable
of every kernel step; ``StepPlan.unavailable`` names the fallback reason when
the sequence cannot run.

``hoist_around=(writes, reads)`` says a prologue (the engine's draft) runs
at the head of the step, writing and reading those buffers: the head's work
that reads none of ``writes`` and writes none of either is
``StepPlan.hoisted`` and runs beside the prologue.  A
composite head is split into its member families for that (their variants
must be built, else the plan stays as the build made it): the token update
stays after the draft, the metadata and attention-tiling updates run
concurrently with it, and what is left on the path from the last draft
kernel to the target forward is one small kernel.  ``run_steps`` walks a sequence over step buffers;
``eager_step`` runs a
whole step on the families' torch semantics (eager), the fallback path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch

from ..specializations.capabilities import SpeculativeVerifyCapabilities
from ..specializations.families import DEFAULT_NUM_SPLITS, FAMILIES, LINEAR_STATE, carried_values
from ..specializations.plan import (
    CONTEXT_KV,
    DRAFT_TO_VERIFY,
    LINEAR_DRAFT_TO_VERIFY,
    SAMPLED_CONTEXT_KV,
    SAMPLED_VERIFY_TO_DRAFT,
    TARGET_FORWARD,
    VERIFY_TO_DRAFT,
    PlanError,
    PlanStep,
)
from ..specializations.targets import TARGET_OF_DEVICE
from ..specializations.variants import Layout, VariantSpec
from . import semantics
from .buffers import alloc_step_buffers
from .library import KernelLibrary, VariantNotBuilt
from .sampling import SAMPLE_ROWS

__all__ = [
    "DEFAULT_SEQUENCE",
    "KERNEL_SOURCES",
    "TAILS",
    "StepPlan",
    "built_layouts",
    "eager_step",
    "eager_steps",
    "head_boundary",
    "plan_build_command",
    "resolve_step_plan",
    "run_steps",
    "semantics_call",
]

# The eager path's sequence (the same order the build's plans capture).
DEFAULT_SEQUENCE = (
    "spec_verify_token_update",
    "spec_verify_metadata_update",
    "spec_verify_attention_tiling_update",
    TARGET_FORWARD,
    "greedy_prefix_verify",
    "prepare_next_draft",
)
KERNEL_SOURCES = ("built", "torch")
# The families after the target forward, per tail boundary (the eager path's order, as the plans capture it).
# A sampling batch's tails put the vocabulary pass ``sample_rows`` (the runtime's ``sampler``) and
# ``spec_rejection_verify`` where the greedy tails have ``greedy_prefix_verify``.
TAILS = {
    VERIFY_TO_DRAFT: DEFAULT_SEQUENCE[DEFAULT_SEQUENCE.index(TARGET_FORWARD) + 1 :],
    CONTEXT_KV: ("greedy_prefix_verify", "prepare_next_block", "context_kv_update"),
    SAMPLED_VERIFY_TO_DRAFT: (SAMPLE_ROWS, "spec_rejection_verify", "prepare_next_draft"),
    SAMPLED_CONTEXT_KV: (SAMPLE_ROWS, "spec_rejection_verify", "prepare_next_block", "context_kv_update"),
}

StepCall = Callable[[PlanStep, list], None]


@dataclass(frozen=True)
class StepPlan:
    """What one verify width runs: the layout, the steps and the callables of the built kernels.

    ``kv_layout`` is ``(block_table_width, block_size)`` or None when nothing is
    built for the width; ``unavailable`` is the fallback reason when the
    sequence cannot run (then ``steps`` is empty).
    """

    kv_layout: tuple[int, int] | None = None  # (block_table_width, block_size)
    steps: tuple[PlanStep, ...] = ()
    kernels: Mapping[str, object] = field(default_factory=dict)  # step name -> KernelCallable
    num_splits: int = DEFAULT_NUM_SPLITS
    unavailable: str | None = None
    hoisted: tuple[PlanStep, ...] = ()  # kernel steps that run beside a prologue (``hoist_around``)
    missing: str | None = None  # what the build lacks when ``unavailable`` is ``variant_not_built``


def head_boundary(linear_state: bool) -> str:
    """The boundary whose plan is a verify step's head: ``draft-to-verify``, or its hybrid-target form."""
    return LINEAR_DRAFT_TO_VERIFY if linear_state else DRAFT_TO_VERIFY


def built_layouts(library: KernelLibrary, width: int, linear_state: bool = False) -> list[tuple[int, int]]:
    """``(block_table_width, block_size)`` of every int32 head plan the build made for ``width``."""
    return [
        (lay.block_table_width, lay.block_size)
        for lay in library.manifest.layouts(head_boundary(linear_state))
        if lay.width == width and lay.draft_dtype == "int32"
    ]


def plan_build_command(layout: Layout, target: str, tail: str = VERIFY_TO_DRAFT, linear_state: bool = False) -> str:
    """The ``specgen build`` command that makes the plans and variants of one verify step at ``layout``."""
    cmd = (
        f"specgen build --boundary {head_boundary(linear_state)},{tail} --widths {layout.width} "
        f"--block-table-widths {layout.block_table_width} --block-sizes {layout.block_size} --draft-dtypes int32"
    )
    return cmd + (f" --target {target}" if target != "c" else "")


def _plan_steps(
    library: KernelLibrary, layout: Layout, tail: str, linear_state: bool = False
) -> tuple[list[PlanStep] | None, str | None]:
    """The kernel and forward steps of one verify step at ``layout``, or None and the plan that is missing."""
    head = head_boundary(linear_state)
    first = library.manifest.plan(head, layout)
    second = library.manifest.plan(tail, layout)
    if first is None or second is None:
        return None, f"the {head if first is None else tail} plan at {layout.key}"
    try:
        after = second.after_forward()
    except PlanError:  # the tail plan has no target forward
        return None, f"a target forward in the {tail} plan at {layout.key}"
    return [s for s in (*first.steps, *after) if s.kind in ("kernel", "forward") or s.name == SAMPLE_ROWS], None


def resolve_step_plan(
    library: KernelLibrary,
    caps: SpeculativeVerifyCapabilities,
    width: int,
    device_type: str,
    kernels: str = "built",
    block_table_width: int | None = None,
    block_size: int | None = None,
    hoist_around: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
    tail: str = VERIFY_TO_DRAFT,
) -> StepPlan:
    """The step plan of ``width`` on ``device_type``, ``tail`` (a key of ``TAILS``) after the forward."""
    if tail not in TAILS:
        raise ValueError(f"tail must be one of {sorted(TAILS)}, got {tail!r}")
    plan = _resolve(library, caps, width, device_type, kernels, block_table_width, block_size, tail)
    if hoist_around is None or plan.unavailable is not None:
        return plan
    hoisted, rest = hoist_split(plan.steps, *hoist_around, num_splits=plan.num_splits)
    if not hoisted:
        return plan
    if kernels == "torch":
        return StepPlan(kv_layout=plan.kv_layout, steps=rest, num_splits=plan.num_splits, hoisted=hoisted)
    split = _bind_kernels(library, width, plan.kv_layout, [*hoisted, *rest], TARGET_OF_DEVICE[device_type])
    if split.unavailable is not None:  # the members are not built: the head stays one kernel after the prologue
        return plan
    return StepPlan(
        kv_layout=plan.kv_layout,
        steps=tuple(rest),
        kernels=split.kernels,
        num_splits=split.num_splits,
        hoisted=tuple(hoisted),
    )


def hoist_split(
    steps, written: tuple[str, ...], read: tuple[str, ...] = (), *, num_splits: int = DEFAULT_NUM_SPLITS
) -> tuple[tuple[PlanStep, ...], tuple[PlanStep, ...]]:
    """``(hoisted, rest)``: the kernel work before the forward that can run beside a prologue, and the rest.

    The prologue writes ``written`` and reads ``read``.  Composites whose
    members read no other member's output are looked at member by member,
    the others (``carried_values``) as a whole; a step is hoisted only if it reads neither ``written`` nor
    anything a step staying before it writes, and writes nothing the
    prologue reads or writes.  Nothing moves past the target forward.
    """
    hoisted, rest, dirty, touched = [], [], set(written), set(written) | set(read)
    before_forward = True
    for step in steps:
        if step.kind != "kernel" or not before_forward:
            before_forward = before_forward and step.kind != "forward"
            rest.append(step)
            continue
        v = step.variant
        members = (FAMILIES[v.family].members if not carried_values(v.family) else ()) or (v.family,)
        parts = [(m, FAMILIES[m]) for m in members]
        free = [
            m for m, f in parts if not {a.name for a in f.inputs} & dirty and not {a.name for a in f.outputs} & touched
        ]
        if not free:
            rest.append(step)
            dirty |= {a.name for a in FAMILIES[v.family].outputs}
            continue
        if len(free) == len(members):
            hoisted.append(step)
            continue
        hoisted += _member_steps(v, free, num_splits)
        for m, f in parts:
            if m not in free:
                rest += _member_steps(v, (m,), num_splits)
                dirty |= {a.name for a in f.outputs}
    return tuple(hoisted), tuple(rest)


def _member_steps(v: VariantSpec, members, num_splits: int) -> list[PlanStep]:
    """Kernel steps of a composite variant ``v``'s ``members`` at its layout."""
    layout = Layout(v.width, v.block_table_width or 0, v.block_size or 0, v.draft_dtype)
    return [PlanStep.kernel(VariantSpec.of(m, layout, num_splits)) for m in members]


def _resolve(
    library: KernelLibrary,
    caps: SpeculativeVerifyCapabilities,
    width: int,
    device_type: str,
    kernels: str,
    block_table_width: int | None,
    block_size: int | None,
    tail: str,
) -> StepPlan:
    bt, bs = block_table_width, block_size
    linear = caps.has_linear_state
    if bt is None or bs is None:
        built = built_layouts(library, width, linear)
        want = (caps.block_table_width, caps.block_size)
        if want in built:
            bt, bs = want
        elif built:
            bt, bs = built[0]
        else:
            return StepPlan(unavailable="variant_not_built", missing=f"a {head_boundary(linear)} plan of width {width}")
    layout = (int(bt), int(bs))
    steps, missing = _plan_steps(library, Layout(width, *layout), tail, linear)
    if steps is None:
        return StepPlan(kv_layout=layout, unavailable="variant_not_built", missing=missing)
    if kernels == "torch":  # the semantics run in the graph; nothing needs to be built
        return StepPlan(kv_layout=layout, steps=tuple(steps))
    return _bind_kernels(library, width, layout, steps, TARGET_OF_DEVICE[device_type])


def _members_where_unbuilt(library: KernelLibrary, steps, target: str) -> list[PlanStep]:
    """``steps`` with each composite whose variant ``target`` lacks, but whose members it has, as its members in
    order (the composite's semantics; a build made with ``--families`` naming the members only)."""

    def built(v: VariantSpec) -> bool:
        return library.has(v.family, v.width, v.block_table_width, v.block_size, target=target)

    out = []
    for step in steps:
        v = step.variant if step.kind == "kernel" else None
        if v is None or not FAMILIES[v.family].members or built(v):
            out.append(step)
            continue
        members = _member_steps(v, FAMILIES[v.family].members, v.num_splits or DEFAULT_NUM_SPLITS)
        out += members if all(built(m.variant) for m in members) else [step]
    return out


def _bind_kernels(
    library: KernelLibrary, width: int, layout: tuple[int, int], steps: list[PlanStep], target: str
) -> StepPlan:
    """The callable of every kernel step for ``target`` (a composite it lacks as its members, where it has them);
    ``variant_not_built`` when one is missing."""
    bound, num_splits = {}, DEFAULT_NUM_SPLITS
    steps = _members_where_unbuilt(library, steps, target)
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
        missing = f"the {target} variant {VariantSpec.of(v.family, Layout(width, *layout)).key}"
        return StepPlan(kv_layout=layout, num_splits=num_splits, unavailable="variant_not_built", missing=missing)
    return StepPlan(kv_layout=layout, steps=tuple(steps), kernels=bound, num_splits=num_splits)


def eager_steps(
    width: int, block_table_width: int, block_size: int, tail: str = VERIFY_TO_DRAFT, linear_state: bool = False
) -> list[PlanStep]:
    """The head of ``DEFAULT_SEQUENCE`` (and the linear state's slots), the forward and ``TAILS[tail]`` as plan
    steps at one layout (the eager path needs no build)."""
    layout = Layout(width, block_table_width, block_size)
    head = DEFAULT_SEQUENCE[: DEFAULT_SEQUENCE.index(TARGET_FORWARD)] + ((LINEAR_STATE,) if linear_state else ())
    special = {TARGET_FORWARD: PlanStep.forward(), SAMPLE_ROWS: PlanStep("other", SAMPLE_ROWS)}
    return [special.get(f) or PlanStep.kernel(VariantSpec.of(f, layout)) for f in (*head, TARGET_FORWARD, *TAILS[tail])]


def semantics_call(block_size: int, num_splits: int) -> StepCall:
    """A step call that runs the family's torch semantics (``runtime/semantics.py``)."""

    def call(step: PlanStep, args: list) -> None:
        family = step.variant.family
        semantics.SEMANTICS[family](*args, **semantics.semantics_kwargs(family, block_size, num_splits))

    return call


def run_steps(
    bufs: Mapping[str, torch.Tensor],
    steps,
    model_forward: Callable,
    call: StepCall,
    after_forward: Callable[[], None] | None = None,
    sampler: Callable[[Mapping[str, torch.Tensor]], None] | None = None,
) -> None:
    """Each step in order over ``bufs``: the forward writes ``target_tokens``, a kernel step goes to ``call``,
    ``sample_rows`` (a sampling tail's vocabulary pass) to ``sampler(bufs)``.

    ``after_forward()`` runs right after the forward (the verify graph joins
    its device guard's side stream there).
    """
    for step in steps:
        if step.name == SAMPLE_ROWS:
            if sampler is None:
                raise ValueError("a sampling tail's sample_rows step needs the runtime's sampler")
            sampler(bufs)
        elif step.kind == "forward":
            out, dst = model_forward(bufs), bufs["target_tokens"]
            if out.data_ptr() != dst.data_ptr() or out.dtype != dst.dtype:  # a forward may write it in place
                dst.copy_(out.reshape(dst.shape))
            if after_forward is not None:
                after_forward()
        else:
            call(step, [bufs[a.name] for a in FAMILIES[step.variant.family].args])


def eager_step(
    model_forward: Callable,
    width: int,
    block_size: int,
    num_splits: int,
    last_tokens: torch.Tensor,
    draft_tokens: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    *,
    scratch_block: int = 0,
    device=None,
    tail: str = VERIFY_TO_DRAFT,
    accepted: torch.Tensor | None = None,
    state_slots: torch.Tensor | None = None,
    sampling: Mapping[str, torch.Tensor] | None = None,
    sampler: Callable[[Mapping[str, torch.Tensor]], None] | None = None,
) -> dict[str, torch.Tensor]:
    """One verify step on the families' torch semantics (eager) in fresh buffers; returns all of them.

    The layout is the caller's (``block_table``'s width, ``block_size``), so
    it needs no build.  A hybrid target passes ``state_slots`` and the previous
    step's ``accepted``: the step then reads the committed linear state from
    the same slot the fast path would.  A sampling tail passes the rows'
    ``sampling`` inputs (``buffers.SAMPLING_INPUTS``, by name) and the ``sampler``.
    """
    batch, bt = int(seq_lens.shape[0]), int(block_table.shape[1])
    bufs = alloc_step_buffers(
        batch, width, bt, block_size=block_size, scratch_block=scratch_block, num_splits=num_splits, device=device
    )
    bufs["last_tokens"].copy_(last_tokens)
    bufs["draft_tokens"].copy_(draft_tokens)
    bufs["seq_lens"].copy_(seq_lens)
    bufs["block_table"].copy_(block_table)
    linear = state_slots is not None
    if linear:
        if accepted is None:
            raise ValueError("eager_step: state_slots needs the previous step's accepted counts")
        bufs["accepted"].copy_(accepted)
        bufs["state_slots"].copy_(state_slots)
    for name, t in (sampling or {}).items():
        bufs[name].copy_(t)
    if batch:
        steps = eager_steps(width, bt, block_size, tail, linear)
        run_steps(bufs, steps, model_forward, semantics_call(block_size, num_splits), sampler=sampler)
    return bufs
