"""Where a profiled step's device time goes: by part of the step and by what each kernel is.

The kernel-level pass's records of a step (``kernel_timeline.attribute``) fall into three parts
(``kernel_timeline.classify``): the ``draft``, the ``boundary`` work around the verification (the verify
phase's records before the target forward's first kernel and after its last: the head update, host-built
inputs' copies, the acceptance and the next draft's inputs) and the target ``forward``.  Each record is put in
a class by its name (``KERNEL_CLASSES``, the first pattern that matches): a cuBLAS GEMM and the project's
skinny GEMM are both ``matmul``, a generated boundary family (``spec_*``, ``greedy_prefix_verify``, ...) is
``boundary family``, and so on.

A cell is device time per step: the durations of the cell's records summed over the step, averaged over the
profiled steps whose forward was located (means, so that the cells of a step add up to its total).  Records
that overlap on two streams both count, so a step's total may exceed its span on the device.

``profiler.figures`` gives each profiled run its breakdown (``kernel_breakdown`` in bench.json),
``breakdown_table`` prints a bench result's, and ``kernel_plot.plot_breakdown`` draws them.
"""

from __future__ import annotations

import re
from collections import defaultdict

from . import kernel_timeline as kt

__all__ = ["KERNEL_CLASSES", "PARTS", "VOCAB_KERNELS", "breakdown_table", "kernel_class", "step_breakdown"]

# the vocabulary pass's kernels (the generated families' entry names hold the family's name)
VOCAB_KERNELS = ("spec_target_sample", "spec_draft_sample")

# (class, pattern searched in the lower-cased kernel name), first match wins
KERNEL_CLASSES = (
    ("vocabulary pass", "|".join(VOCAB_KERNELS)),
    ("boundary family", r"^(spec_|greedy_prefix_verify|prepare_next_|context_kv_update)"),
    ("matmul", r"nvjet|gemm|cutlass|xmma|splitkreduce"),
    ("delta rule", r"delta_rule|_wy_"),
    ("conv", r"conv"),
    ("attention", r"attention|flash|rope"),
    ("norm", r"norm"),
    ("argmax", r"argmax"),
    ("copy", r"^memcpy|^memset|copy"),
    ("other torch", r"at::"),
    ("other", r""),
)
_PATTERNS = tuple((name, re.compile(pattern)) for name, pattern in KERNEL_CLASSES)
PARTS = ("draft", "boundary", "forward")
_PART_OF = {"draft": "draft", "head": "boundary", "tail": "boundary", "forward": "forward"}
TOP_KERNELS = 12  # the heaviest kernels a breakdown lists by name


def kernel_class(name: str) -> str:
    """The class of a device record named ``name`` (``KERNEL_CLASSES``)."""
    low = name.lower()
    return next(cls for cls, pattern in _PATTERNS if pattern.search(low))


def step_breakdown(steps: dict[int, kt.StepKernels], forward, top: int = TOP_KERNELS) -> dict | None:
    """``{"steps": n, "parts": {part: {class: us}}, "kernels": [...]}`` over the ``n`` steps of ``steps`` that
    have draft records and a located forward (None where none has): each part's device time per step by class,
    and the ``top`` heaviest (kernel name, part) pairs with their calls and time per step."""
    cells: dict[tuple[str, str], float] = defaultdict(float)
    named: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0, 0.0])
    n = 0
    for step in steps.values():
        if not step.draft or kt.forward_span(step.verify, forward) is None:
            continue
        n += 1
        for rec, kind in kt.classify(step, forward):
            part = _PART_OF[kind]
            cells[(part, kernel_class(rec.name))] += rec.dur
            named[(rec.name, part)][0] += 1
            named[(rec.name, part)][1] += rec.dur
    if n == 0:
        return None
    parts = {p: {c: round(cells[(p, c)] / n, 3) for c, _ in KERNEL_CLASSES if (p, c) in cells} for p in PARTS}
    heavy = sorted(named.items(), key=lambda kv: -kv[1][1])[:top]
    kernels = [
        {"name": name, "class": kernel_class(name), "part": part, "calls": round(c / n, 2), "us": round(t / n, 3)}
        for (name, part), (c, t) in heavy
    ]
    return {"steps": n, "parts": parts, "kernels": kernels}


def _short(name: str, width: int = 64) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def breakdown_table(result: dict, width: int = 64) -> str:
    """The runs' breakdowns as text: per (depth, batch), a line per mode and part with the part's total and its
    classes (those over 1% of some line), then the heaviest kernels of the last mode's run.  Empty when no run
    has a breakdown."""
    runs = [r for r in result.get("runs", []) if r.get("kernel_breakdown")]
    if not runs:
        return ""
    out = ["where a step's device time goes (us per step, kernel-level pass; records on two streams both count)"]
    for key in sorted({(r["depth"], r["batch"]) for r in runs}):
        group = [r for r in runs if (r["depth"], r["batch"]) == key]
        lines = [(r["mode"], p, r["kernel_breakdown"]["parts"][p]) for r in group for p in PARTS]
        shown = [
            c for c, _ in KERNEL_CLASSES if any(cells.get(c, 0.0) > 0.01 * sum(cells.values()) for *_, cells in lines)
        ]
        out.append(f"depth {key[0]}, B = {key[1]}")
        out.append(f"  {'mode':<10} {'part':<9} {'total':>9}" + "".join(f" {c:>{max(len(c), 8)}}" for c in shown))
        for mode, part, cells in lines:
            row = f"  {mode:<10} {part:<9} {sum(cells.values()):9.1f}"
            out.append(row + "".join(f" {cells.get(c, 0.0):{max(len(c), 8)}.1f}" for c in shown))
        last = group[-1]
        out.append(f"  heaviest kernels of {last['mode']}: us per step, calls per step, part")
        for k in last["kernel_breakdown"]["kernels"]:
            out.append(f"    {k['us']:9.1f} {k['calls']:6.1f}  {k['part']:<8} {_short(k['name'], width)}")
    return "\n".join(out)
