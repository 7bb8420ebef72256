"""What ``specgen plan --compare`` adds to a planned bubble: the work the runtime does at a boundary outside the
boundary's plan, per mode (``OUT_OF_PLAN`` at verify->draft, ``OUT_OF_PLAN_D2V`` at draft->verify), and where
each figure comes from: the calibration (``--costs``, by batch, else pooled) or the kernel traces beside
bench.json (``trace_terms``), which also count the launches of the work the plan does not describe
(``head_launches``)."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

__all__ = [
    "AFTER_SYNC",
    "CLOCK_ONLY",
    "FIGURES_OF",
    "HEAD_AS_RAN",
    "OUT_OF_PLAN",
    "OUT_OF_PLAN_D2V",
    "OWN_ONLY",
    "REPLACES_PLAN",
    "TERMS_AT",
    "head_launches",
    "out_of_plan",
    "sources",
    "trace_terms",
]

# verify->draft work outside the plan, per mode (the cost file's ``boundary`` figures).  After compile's
# read-back the planned bubble gives way to the host's turnaround: where the calibration has the host clock's
# (``host_turnaround``), that, the draft graph's launch call (``issue.graph_replay``, as ``draft_launch``) and the
# launch's device latency (``read_back_launch``); else the profiled steps' whole turnaround (``read_back``, which
# CUPTI inflates).  Baseline adds the host clock's turnaround after its
# host tail (the engine loop's own work up to the next draft's launch).
OUT_OF_PLAN = {
    "baseline": ("host_turnaround",),
    "specgen": ("cast", "graph_pack", "after_replay", "graph_switch"),
    "inductor": ("graph_tail", "cast", "graph_pack", "after_replay", "graph_switch"),
    "compile": ("read_back", "host_turnaround", "read_back_launch"),
}
AFTER_SYNC = (
    "read_back",
    "host_turnaround",
    "draft_launch",
    "read_back_launch",
)  # compile's turnaround, in place of the plan
# draft->verify work outside the plan: the device's hand-over from the draft's last record to the verify's first
OUT_OF_PLAN_D2V = {"specgen": ("draft_handover",), "inductor": ("draft_handover",), "compile": ("draft_handover",)}
TERMS_AT = {"verify-to-draft": OUT_OF_PLAN, "draft-to-verify": OUT_OF_PLAN_D2V}
# modes whose work before the forward runs as kernels the plan does not describe (compile's head: the updates
# as torch.compile'd kernels, 6-12 a step): their draft->verify prices the launches their own trace counts
# (``head_launches``) at ``in_graph_kernel + in_graph_gap`` each, in place of the planned head (``graph_head``)
HEAD_AS_RAN = frozenset({"compile"})
FIGURES_OF = {"inductor": "specgen"}  # runs the same runtime: takes specgen's figures when it has none of its own
# a term measured for the mode's own kernels, never borrowed from FIGURES_OF
OWN_ONLY = frozenset({"graph_tail"})
# terms that stand in for the planned bubble (and for the terms whose time they hold): ``graph_tail`` is
# inductor's tail as its several Triton kernels ran, where the plan prices one composite launch
REPLACES_PLAN = {"graph_tail": ("cast",)}


CLOCK_ONLY = frozenset({"host_turnaround"})  # terms only the host clock gives (no trace holds them)


def _from_trace(mode) -> bool:
    """Whether a mode's trace can give it a figure (an out-of-plan term, or its head's launch count)."""
    terms = set(OUT_OF_PLAN.get(mode, ())) | set(OUT_OF_PLAN_D2V.get(mode, ()))
    return bool(terms - CLOCK_ONLY) or mode in HEAD_AS_RAN


def trace_terms(result: dict, folder: str | Path) -> dict:
    """The ``boundary`` figures of the runs whose kernel trace lies in ``folder`` (bench.json's): per batch
    and pooled, ``{mode: {term: median us}}``, and the traces read (``files``)."""
    from ..bench import kernel_timeline as kt
    from ..bench.boundary_terms import boundary_terms

    folder, pooled, by_batch, files, counts = Path(folder), {}, {}, [], {}
    for run in result.get("runs", []):
        name = run.get("kernel_trace")
        if not name or "error" in run or not _from_trace(run.get("mode")):
            continue
        path = next((p for p in (folder / name, folder / Path(name).name) if p.is_file()), None)
        if path is None:
            continue
        data = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
        names = data.get("specgen") or {}
        events, forward = kt.load_trace(data), list(names.get("forward_kernels") or [])
        if not forward:
            continue
        steps = kt.attribute(events, names.get("draft_kernels") or [])
        terms = boundary_terms(events, steps, forward)
        files.append(path.name)
        if run["mode"] in HEAD_AS_RAN and (n := head_launches(steps, forward)):
            key = f"{run['depth']}/{run['batch']}"  # one run's count: depths differ in what their head runs
            counts.setdefault(run["mode"], {})[key] = statistics.median(n)
        for term in OUT_OF_PLAN[run["mode"]] + OUT_OF_PLAN_D2V.get(run["mode"], ()):
            if terms.get(term):
                by_batch.setdefault(str(run["batch"]), {}).setdefault(run["mode"], {})[term] = terms[term]
                pooled.setdefault(run["mode"], {}).setdefault(term, []).extend(terms[term])
    med = lambda d: {m: {t: round(statistics.median(v), 3) for t, v in ts.items()} for m, ts in d.items()}  # noqa: E731
    return {
        "by_batch": {b: med(d) for b, d in by_batch.items()},
        "pooled": med(pooled),
        "files": files,
        "head_launches": counts,
    }


def head_launches(steps: dict, forward: list) -> list[int]:
    """Per step of a kernel trace (``kernel_timeline.attribute``'s ``steps``): the kernels the forward's stream
    ran after the draft's last record and before the forward's first kernel (the head as it ran)."""
    from ..bench import kernel_timeline as kt

    out = []
    for s in steps.values():
        found = kt.forward_span(s.verify, forward)
        if found is None or not s.draft:
            continue
        first, end = found[0], max(r.end for r in s.draft)
        out.append(
            sum(r.cat == "kernel" and r.stream == first.stream and end <= r.start < first.start for r in s.verify)
        )
    return out


def out_of_plan(mode: str, batch: int, costs: dict | None, traces: dict | None, boundary: str) -> tuple[dict, dict]:
    """The out-of-plan figures a (mode, batch) cell adds at ``boundary`` and, per figure, where it came from."""
    sources = []
    if costs is not None:
        sources += [((costs.get("by_batch") or {}).get(str(batch)) or {}, "costs, by batch"), (costs, "costs")]
    if traces:
        sources += [((traces["by_batch"].get(str(batch)) or {}), "trace"), (traces["pooled"], "trace, pooled")]
    # each term from the first source that has it: a cost file made before a term existed lacks it, and the
    # traces beside bench.json can still give it
    got, src = {}, {}
    for term in TERMS_AT[boundary].get(mode, ()):
        for owner in (mode,) if term in OWN_ONLY else (mode, FIGURES_OF.get(mode)):
            found = None
            for figures, where in sources:
                have = ((figures.get("boundary") if where.startswith("costs") else figures) or {}).get(owner) or {}
                if owner is not None and term in have:
                    found = float(have[term]), where + ("" if owner == mode else f", {owner}'s")
                    break
            if found is not None:
                got[term], src[term] = found
                break
    return got, src


def sources(src: dict, terms: dict) -> str | None:
    """Where the figures of ``terms`` came from, each source once (None: no figure)."""
    used = list(dict.fromkeys(src[t] for t in terms if t in src))
    return "; ".join(used) if used else None
