"""What a serving run records, as plain data: per request and per decode step, and the figures taken from them.

The serving loop fills a ``ServeRun``; the serving benchmark reads it.  Times
are seconds on the run's own clock (0 at its start)::

    >>> run = ServeRun(mode="specgen", draft="mtp", depth=3)
    >>> run.requests.append(RequestRecord(0, arrival=0.0, prompt_len=4, token_times=[0.5, 0.6, 0.7],
    ...                                   output_len=3, finish="length"))
    >>> run.steps.append(StepRecord(t=0.6, batch=1, fast_path=True, host_syncs=0, tokens=2, proposed=3, accepted=1))
    >>> m = run.metrics(); m["ttft_s"]["p50"], m["fast_path_share"], m["output_tokens"]
    (0.5, 1.0, 3)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

__all__ = ["RequestRecord", "ServeRun", "StepRecord", "percentiles"]

QUANTILES = (50, 90, 99)


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50, p90, p99 by linear interpolation between closest ranks; ``None`` for no values."""
    xs = sorted(values)
    out: dict[str, float | None] = {}
    for q in QUANTILES:
        if not xs:
            out[f"p{q}"] = None
            continue
        pos = (len(xs) - 1) * q / 100
        lo, hi = math.floor(pos), math.ceil(pos)
        out[f"p{q}"] = xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
    return out


@dataclass(slots=True)
class RequestRecord:
    """One request's life: when it arrived, when each output token became known to the host, how it ended."""

    id: int
    arrival: float
    prompt_len: int
    token_times: list[float] = field(default_factory=list)  # one per output token, in order
    output_len: int = 0
    finish: str | None = None  # "stop" | "length" | None (unfinished when the run ended)
    preemptions: int = 0

    @property
    def ttft(self) -> float | None:
        return self.token_times[0] - self.arrival if self.token_times else None

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        n = len(self.token_times)
        return (self.token_times[-1] - self.token_times[0]) / (n - 1) if n > 1 else None

    def itls(self) -> list[float]:
        """Inter-token latencies (tokens committed in one step share a time: their gaps are 0)."""
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]


@dataclass(slots=True)
class StepRecord:
    """One decode step of the running batch: ``batch`` (rows of the step, padding rows of a
    bucket not counted), ``fast_path`` and ``reason`` (the runtime's ``StepResult`` in
    ``specgen`` and ``inductor``; ``True`` / ``None`` in ``baseline`` and ``compile``, which have no fallback),
    ``host_syncs`` (synchronizations reported by ``torch.cuda``'s sync debug mode over
    the step's host part on a CUDA device, the row remap and the launch, the read-back
    excluded as in the engine; 0 on the CPU, where nothing is measured), ``tokens`` (emitted after the cut at a stop
    token or the budget), ``proposed`` / ``accepted`` (drafts of the step's rows),
    ``bucket`` (the runtime's batch bucket; ``specgen`` and ``inductor`` only), ``remaps`` (1 when rows that
    stay moved before the step: 0 when every row kept its index and buffers), ``joined``
    (rows written from a prefill or a parked row), ``remap_path`` (``kernel``: the built remap
    family moved the rows; ``torch``: its semantics; ``None``: nothing moved) and
    ``remap_reason`` (why ``torch``: ``mode``, ``not_built``, ``guard_failed``).
    """

    t: float  # when the step's tokens became known to the host
    batch: int  # sequences in the step
    fast_path: bool
    host_syncs: int  # host synchronizations in the step, read-backs excluded
    tokens: int = 0  # tokens committed
    proposed: int = 0  # draft tokens proposed
    accepted: int = 0  # draft tokens accepted
    reason: str | None = None  # why the step left the fast path
    bucket: int | None = None  # the captured bucket it ran in
    remaps: int = 0  # row remaps (gathers of the per-row state) before the step: 0 when every row kept its index
    joined: int = 0  # rows written fresh before the step (after a prefill, or after sitting a step out)
    remap_path: str | None = None  # how the rows moved: "kernel" (the built family), "torch", None (nothing moved)
    remap_reason: str | None = None  # why the rows moved in torch: "mode", "not_built", "guard_failed"
    step: int = -1  # the scheduler's step number (the ``specgen::serve#<step>`` range that launched it)


@dataclass(slots=True)
class ServeRun:
    """A whole serving run of one mode and draft: its records and its settings."""

    mode: str
    draft: str
    depth: int
    rate: float | None = None  # requests per second (None: all at once, or a closed loop)
    in_flight: int | None = None  # a closed loop's N
    requests: list[RequestRecord] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    preemptions: int = 0
    elapsed_s: float = 0.0
    settings: dict = field(default_factory=dict)
    transition_idle: dict | None = None  # the device idle at batch transitions (bench/serve_transitions.py)
    prefill_chunks: int = 0
    prefill_host_syncs: int = 0  # host synchronizations while the prefill chunks were launched (CUDA)
    longest_iteration_s: float = 0.0  # the loop's longest iteration (schedule, prefills, step, reads), and its step
    longest_iteration_step: int = -1
    jit_compiles: list[str] = field(default_factory=list)  # kernels JIT-compiled inside the run (the bench's watch)

    def metrics(self) -> dict:
        """Throughput, latency percentiles, acceptance, fast-path share and fallbacks by reason."""
        done = [r for r in self.requests if r.finish is not None]
        out_tokens = sum(r.output_len for r in self.requests)
        elapsed = self.elapsed_s or (max((s.t for s in self.steps), default=0.0))
        fallbacks: dict[str, int] = {}
        for s in self.steps:
            if not s.fast_path:
                fallbacks[s.reason or "unknown"] = fallbacks.get(s.reason or "unknown", 0) + 1
        proposed = sum(s.proposed for s in self.steps)
        moves = [s for s in self.steps if s.remap_path is not None]
        slow: dict[str, int] = {}
        for s in moves:
            if s.remap_path != "kernel":
                slow[s.remap_reason or "unknown"] = slow.get(s.remap_reason or "unknown", 0) + 1
        return {
            "requests": len(self.requests),
            "finished": len(done),
            "output_tokens": out_tokens,
            "request_throughput": len(done) / elapsed if elapsed > 0 else None,
            "output_tokens_per_s": out_tokens / elapsed if elapsed > 0 else None,
            "ttft_s": percentiles([r.ttft for r in self.requests if r.ttft is not None]),
            "tpot_s": percentiles([r.tpot for r in self.requests if r.tpot is not None]),
            "itl_s": percentiles([x for r in self.requests for x in r.itls()]),
            "acceptance": sum(s.accepted for s in self.steps) / proposed if proposed else None,
            "decode_steps": len(self.steps),
            "fast_path_steps": sum(s.fast_path for s in self.steps),
            "fast_path_share": sum(s.fast_path for s in self.steps) / len(self.steps) if self.steps else None,
            "fallbacks": fallbacks,
            # steps whose rows changed (left, joined or moved): remapped by the kernel family, or in torch and why
            "transitions": {
                "steps": len(moves),
                "kernel": sum(s.remap_path == "kernel" for s in moves),
                "torch": slow,
            },
            "host_syncs_per_step": sum(s.host_syncs for s in self.steps) / len(self.steps) if self.steps else None,
            # a prefill's token read at once is one; read a step late (late_first), none
            "host_syncs_per_prefill": self.prefill_host_syncs / self.prefill_chunks if self.prefill_chunks else None,
            "preemptions": self.preemptions,
            "longest_iteration_s": self.longest_iteration_s,
            "longest_iteration_step": self.longest_iteration_step,
            "jit_compiles": len(self.jit_compiles),
        }

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "draft": self.draft,
            "depth": self.depth,
            "rate": self.rate,
            "in_flight": self.in_flight,
            "settings": self.settings,
            "metrics": self.metrics(),
            "requests": [asdict(r) for r in self.requests],
            "steps": [asdict(s) for s in self.steps],
            **({"transition_idle": self.transition_idle} if self.transition_idle is not None else {}),
            **({"jit_compiles": self.jit_compiles} if self.jit_compiles else {}),
        }
