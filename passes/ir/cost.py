"""Cost model, schedule simulation, critical path and the predicted bubble.

Costs are microseconds.  A device op costs the host ``issue`` time to launch
and then ``run`` time on its stream; a host op costs ``run`` time on the
host.  The simulation starts each op at the latest of (the host having issued
it, all its happens-before predecessors finished); the bubble is the time from
the boundary's start op finishing to its end op starting.

Defaults are leads from an H200 with torch 2.11 (see docs/passes.md); a JSON file
such as ``{"run": {"host_compute": 20}, "issue": {"device_kernel": 6}}``
overrides any of them.  ``specgen bench`` writes such a file (``costs.json``):
device costs from its profiled steps' kernel trace, host API costs (``issue``)
from an unprofiled host clock around each call; besides ``run`` / ``issue`` / ``in_graph_*`` (a kernel's and
a copy's device time in a graph, and ``in_graph_gap``, the idle between two kernels a graph runs back to
back, which ``specgen plan --compare`` charges per launch where it counts launches) it may
carry ``host_family`` (the host's time for one step of a kernel family's
torch semantics, e.g. ``{"spec_verify_head_update": 180}``: the host compute
ops of that family, or of a composite's members, share it evenly),
``boundary`` (per mode, what its runtime does at a boundary outside the
boundary's plan, ``BOUNDARY_TERMS``, e.g. ``{"specgen": {"graph_switch": 6.3}}``;
the graph does not hold that work, so ``specgen plan --compare`` adds the
figures to the predicted bubble; a file without them adds nothing) and, for
the reader, ``measured`` / ``source`` / ``by_batch`` / ``method`` / ``methods`` /
``host_clock`` / ``not_measured`` / ``machine`` / ``model_shape`` (provenance,
how each figure was taken and per-batch figures, which the model itself does
not read).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ...specializations.families import FAMILIES
from .analysis import Ordering
from .core import BoundaryGraph, Op, OpKind

DEFAULT_RUN_US = {
    "device_kernel": 4.0,
    "host_compute": 12.0,
    "h2d": 3.0,
    "d2h": 3.0,
    "host_sync": 10.0,
    "event_record": 0.5,
    "event_wait": 0.5,
    "graph_replay": 0.0,
    "graph_task_update": 25.0,
}
DEFAULT_ISSUE_US = {
    "device_kernel": 5.0,
    "h2d": 8.0,
    "d2h": 8.0,
    "event_record": 2.0,
    "event_wait": 2.0,
    "graph_replay": 10.0,
}
IN_GRAPH_KERNEL_US = 1.5
IN_GRAPH_COPY_US = 2.0
# the idle between two kernels one graph replay runs back to back on one stream: the median of the e56411c
# sweep's H100 traces (benchmarks/results/performance/sweep_e56411c_h100), 0.42 us in every mode and batch
IN_GRAPH_GAP_US = 0.42
COST_KEYS = frozenset({"run", "issue", "in_graph_kernel", "in_graph_copy", "in_graph_gap", "host_family", "boundary"})
# work outside a boundary's plan (bench/boundary_terms.py measures each from a kernel trace): verify->draft's,
# then draft->verify's graph switch
BOUNDARY_TERMS = (
    "cast",
    "graph_tail",
    "graph_pack",
    "after_replay",
    "graph_switch",
    "read_back",
    "host_turnaround",
    "read_back_launch",
    "draft_handover",
)
# for the reader (how each figure was taken, on what); the model ignores them
PROVENANCE_KEYS = frozenset(
    {"measured", "source", "by_batch", "method", "methods", "host_clock", "not_measured", "machine", "model_shape"}
)


@dataclass(frozen=True)
class CostModel:
    run: dict = field(default_factory=lambda: dict(DEFAULT_RUN_US))
    issue: dict = field(default_factory=lambda: dict(DEFAULT_ISSUE_US))
    in_graph_kernel: float = IN_GRAPH_KERNEL_US
    in_graph_copy: float = IN_GRAPH_COPY_US
    in_graph_gap: float = IN_GRAPH_GAP_US  # priced where a count of launches stands in for a plan (plan --compare)

    host_family: dict = field(default_factory=dict)  # family -> host us per step, shared by its host ops
    boundary: dict = field(default_factory=dict)  # mode -> {BOUNDARY_TERMS key: us}, outside the plan

    @classmethod
    def from_json(cls, path: str | Path) -> "CostModel":
        return cls.from_dict(json.loads(Path(path).read_text()), str(path))

    @classmethod
    def from_dict(cls, data: dict, where: str = "costs") -> "CostModel":
        """The defaults overridden by ``data`` (the calibration file's object); ``ValueError`` names what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"{where}: a cost file is a JSON object, not {type(data).__name__}")
        unknown = set(data) - COST_KEYS - PROVENANCE_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown cost keys {sorted(unknown)}")
        for key in PROVENANCE_KEYS & set(data):
            if not isinstance(data[key], dict):
                raise ValueError(f"{where}: '{key}' must be an object")
        base = cls()
        for part in ("run", "issue"):
            bad = set(data.get(part, {})) - set(DEFAULT_RUN_US)
            if bad:
                raise ValueError(f"{where}: unknown op kinds under '{part}': {sorted(bad)}")
            getattr(base, part).update({k: float(v) for k, v in data.get(part, {}).items()})
        fams = data.get("host_family", {})
        if not isinstance(fams, dict) or set(fams) - set(FAMILIES):
            raise ValueError(
                f"{where}: 'host_family' must map kernel families to microseconds; unknown: "
                f"{sorted(set(fams) - set(FAMILIES)) if isinstance(fams, dict) else fams}"
            )
        terms = data.get("boundary", {})
        bad = (
            [f"{m}.{t}" for m, ts in terms.items() if isinstance(ts, dict) for t in ts if t not in BOUNDARY_TERMS]
            if isinstance(terms, dict)
            else [terms]
        )
        if bad or not all(isinstance(ts, dict) for ts in terms.values()):
            raise ValueError(
                f"{where}: 'boundary' must map modes to {{term: microseconds}} with terms among "
                f"{', '.join(BOUNDARY_TERMS)}; unknown: {bad}"
            )
        return cls(
            base.run,
            base.issue,
            float(data.get("in_graph_kernel", base.in_graph_kernel)),
            float(data.get("in_graph_copy", base.in_graph_copy)),
            float(data.get("in_graph_gap", base.in_graph_gap)),
            {k: float(v) for k, v in fams.items()},
            {m: {t: float(v) for t, v in ts.items()} for m, ts in terms.items()},
        )

    def host_costs(self, graph: BoundaryGraph) -> dict[str, float]:
        """Per host compute op of ``graph`` whose family (or a composite holding it) has a ``host_family`` time:
        that time shared evenly among the graph's host compute ops of the same family (or composite)."""
        if not self.host_family:
            return {}
        groups: dict[str, list[str]] = {}
        for o in graph.ops:
            fam = o.attr("family") if o.kind is OpKind.HOST_COMPUTE else None
            if fam is None:
                continue
            owner = (
                fam
                if fam in self.host_family
                else next((c for c in self.host_family if fam in FAMILIES[c].members), None)
            )
            if owner is not None:
                groups.setdefault(owner, []).append(o.name)
        return {n: self.host_family[f] / len(ops) for f, ops in groups.items() for n in ops}

    def run_us(self, op: Op, host: dict[str, float] | None = None) -> float:
        if op.cost_us is None and host and op.name in host:
            return host[op.name]
        base = op.cost_us if op.cost_us is not None else self.run[op.kind.value]
        if op.kind is OpKind.GRAPH_REPLAY:
            base += self.in_graph_kernel * op.attr("captured_kernels", 0)
            base += self.in_graph_copy * op.attr("captured_copies", 0)
        return base

    def issue_us(self, op: Op) -> float:
        return 0.0 if op.kind.on_host else self.issue.get(op.kind.value, 0.0)


@dataclass
class Schedule:
    start: dict[str, float]
    finish: dict[str, float]
    blame: dict[str, str | None]  # the predecessor (or issuing host step) that set each op's start

    def critical_path(self, graph: BoundaryGraph) -> list[str]:
        """Ops from the boundary start to its end along the binding constraints, in time order."""
        path, node = [], graph.end
        stop = self.finish[graph.start]
        while node is not None and self.finish.get(node, 0.0) > stop - 1e-9 and node != graph.start:
            path.append(node)
            node = self.blame.get(node)
        return list(reversed(path))


def simulate(graph: BoundaryGraph, model: CostModel | None = None) -> Schedule:
    model = model or CostModel()
    hb = Ordering(graph).hb
    host = model.host_costs(graph)
    start, finish, blame = {}, {}, {}
    host_clock, host_last = 0.0, None
    for o in graph.ops:
        host_clock += model.issue_us(o)
        t, who = host_clock, host_last
        for p in hb.predecessors(o.name):
            if finish[p] > t:
                t, who = finish[p], p
        start[o.name], blame[o.name] = t, who
        finish[o.name] = t + model.run_us(o, host)
        if o.kind.on_host:
            host_clock = finish[o.name]
        host_last = o.name if o.kind.on_host or model.issue_us(o) > 0 else host_last
    return Schedule(start, finish, blame)


def bubble_us(graph: BoundaryGraph, model: CostModel | None = None, sched: Schedule | None = None) -> float:
    """From the start op finishing to the end op's own work starting.

    A replay whose graph begins with captured update kernels starts its
    forward only after them, so they count as bubble too; one that ends with
    captured work (the verify tail) finished its forward that much earlier.
    Both are priced with ``model``'s in-graph costs.
    """
    model = model or CostModel()
    s = sched or simulate(graph, model)
    end, start = graph.op(graph.end), graph.op(graph.start)
    head = end.attr("head_ops", 0) * model.in_graph_kernel if end.kind is OpKind.GRAPH_REPLAY else 0.0
    tail = 0.0
    if start.kind is OpKind.GRAPH_REPLAY:  # captured work after the forward ends the boundary's start
        tail = (
            start.attr("tail_kernels", 0) * model.in_graph_kernel + start.attr("tail_copies", 0) * model.in_graph_copy
        )
    return max(0.0, s.start[graph.end] + head - (s.finish[graph.start] - tail))
