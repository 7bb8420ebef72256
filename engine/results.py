"""What a decode run returns: the tokens, the acceptance and the per-step timings."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["RunResult", "StepTiming"]


@dataclass(frozen=True)
class StepTiming:
    """Device times of one step (microseconds, from CUDA events) and its host synchronizations."""

    draft_us: float  # draft graph
    verify_span_us: float  # end of the draft graph -> end of the verify graph (boundary + verify graph)
    gap_us: float  # end of the verify graph -> start of the next draft graph (read-back, host tail)
    host_syncs: int | None  # counted by torch.cuda's sync debug mode; None on the CPU


@dataclass
class RunResult:
    """One ``SpecDecodeEngine.run``: filled in step by step, then by the clock at the end."""

    mode: str
    width: int
    batch: int
    outputs: list[list[int]]  # committed tokens per sequence
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    timings: list[StepTiming] = field(default_factory=list)
    elapsed_s: float = 0.0  # timed steps, first draft start -> last verification end
    timed_tokens: int = 0  # tokens committed in the timed steps (all sequences)
    lagged_event_waits: int = 0  # lagged modes: waits on a previous step's copy event
    runtime_stats: dict | None = None
    capture_s: float | None = None  # capturing the run's graphs (draft and verify), device work included
    trace: dict | None = None  # the profiled steps' Chrome trace (``run(profile=True)``)
    fused_draft: bool = False  # the mode's step graph ran the draft (``draft_us`` then spans nothing)
    # timed steps of a mode whose host waits for the step (``Mode.synced_ns``): the host's time from the end of
    # that wait's work to the next draft graph's launch call (us, host clock, no profiler)
    host_turnaround_us: list[float] = field(default_factory=list)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def commit(self, accepted: list[int], rows: list[list[int]], timed: bool, max_new_tokens: int | None) -> None:
        """Append each sequence's accepted drafts and bonus (``rows[b][:a + 1]``); count active ones only."""
        self.steps += timed
        for o, a, row in zip(self.outputs, accepted, rows):
            room = (a + 1) if max_new_tokens is None else max(0, min(a + 1, max_new_tokens - len(o)))
            if max_new_tokens is None or len(o) < max_new_tokens:
                self.drafted += self.width - 1
                self.accepted += a
            if timed:
                self.timed_tokens += room  # a finished sequence's extra tokens are not output
            o.extend(row[: a + 1])
