"""A request of the serving loop: what was asked (prompt, budget, stop tokens) and how far it got.

>>> r = Request(0, prompt=(5, 6, 7), max_new_tokens=3, stop_ids=frozenset({2}))
>>> r.append([9, 2, 4])        # a speculative step may produce past the stop token
True
>>> r.output, r.finish_reason
([9, 2], <FinishReason.STOP: 'stop'>)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ...runtime.sampling import SamplingParams

__all__ = ["FinishReason", "Request", "RequestState"]


class RequestState(Enum):
    """Where a request is: queued, in the batch, pushed out of it (queued again), or done."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class FinishReason(Enum):
    """Why a request finished: it produced a stop token, or it used its whole budget."""

    STOP = "stop"
    LENGTH = "length"


@dataclass(slots=True)
class Request:
    """One request: ``prompt`` token ids, a budget of ``max_new_tokens``, ``stop_ids``, an ``arrival`` time.

    ``num_computed`` counts the tokens of ``prefix`` whose KV is written and
    ``prefill_len`` how many its prefill covers (``len(prefix)`` at admission);
    a preempted request starts again from 0 and recomputes ``prompt + output``.
    ``sampling``: its ``SamplingParams`` (``None`` or temperature 0: greedy); its random keys are its
    seed and the positions, whichever row it holds.
    """

    id: int
    prompt: tuple[int, ...]
    max_new_tokens: int
    stop_ids: frozenset[int] = frozenset()
    arrival: float = 0.0
    state: RequestState = RequestState.WAITING
    output: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    num_computed: int = 0
    prefill_len: int = 0
    preemptions: int = 0
    sampling: SamplingParams | None = None

    def __post_init__(self):
        self.prompt = tuple(int(t) for t in self.prompt)
        self.stop_ids = frozenset(int(t) for t in self.stop_ids)
        if not self.prompt:
            raise ValueError(f"request {self.id}: an empty prompt")
        if self.max_new_tokens < 1:
            raise ValueError(f"request {self.id}: max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.sampling is not None and not isinstance(self.sampling, SamplingParams):
            raise ValueError(f"request {self.id}: sampling must be a SamplingParams or None")

    @property
    def params(self) -> SamplingParams:
        """Its sampling parameters (greedy ones when it has none)."""
        return self.sampling if self.sampling is not None else SamplingParams()

    @property
    def sampled(self) -> bool:
        """Whether it samples (temperature > 0)."""
        return self.sampling is not None and not self.sampling.greedy

    @property
    def resume_len(self) -> int:
        """What an admission prefills: the whole prefix, or, for a sampled request readmitted with output, all
        but its last token, which becomes the first step's input: a recompute draws no token again (a draw
        at a step boundary other than the original's would differ), so its tokens are those of a run
        without preemption."""
        return self.length - 1 if self.sampled and self.output else self.length

    @property
    def prefix(self) -> tuple[int, ...]:
        """The sequence so far: the prompt, then every token produced."""
        return self.prompt + tuple(self.output)

    @property
    def length(self) -> int:
        """``len(prefix)`` without building it."""
        return len(self.prompt) + len(self.output)

    @property
    def in_prefill(self) -> bool:
        """Whether its prefill (chunked) is still under way; past it, the request runs verify steps."""
        return self.num_computed < self.prefill_len

    @property
    def finished(self) -> bool:
        return self.state is RequestState.FINISHED

    def append(self, tokens) -> bool:
        """Append ``tokens``, cut at the first stop token or at the budget; ``True`` if that finished it."""
        if self.finished:
            raise ValueError(f"request {self.id} already finished ({self.finish_reason.value})")
        for t in tokens:
            self.output.append(int(t))
            if int(t) in self.stop_ids:
                self.finish_reason = FinishReason.STOP
            elif len(self.output) >= self.max_new_tokens:
                self.finish_reason = FinishReason.LENGTH
            if self.finish_reason is not None:
                self.state = RequestState.FINISHED
                return True
        return False
