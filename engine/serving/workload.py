"""Seeded serving workloads: when requests arrive and how long their prompts and outputs are.

Open loop (arrivals by a Poisson process at ``rate`` requests per second, or all
at time 0 when ``rate`` is ``None``)::

    >>> reqs = Workload(num_requests=3, rate=2.0, prompt_len=LengthDist.fixed(4), seed=0).requests()
    >>> [len(r.prompt) for r in reqs], all(a.arrival <= b.arrival for a, b in zip(reqs, reqs[1:]))
    ([4, 4, 4], True)

Closed loop (``ClosedLoop(workload, in_flight=N)``): ``N`` requests at time 0,
then one more each time one finishes, until the workload's requests run out.
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass, field

from ...runtime.sampling import SamplingParams
from .requests import Request

__all__ = ["ClosedLoop", "LengthDist", "Workload"]


@dataclass(slots=True, frozen=True)
class LengthDist:
    """A length distribution: ``fixed``, ``uniform`` on ``[low, high]``, or ``lognormal`` clipped to ``[low, high]``.

    ``lognormal`` draws ``exp(N(log(median), sigma))``, the long-tailed shape of
    conversation datasets such as ShareGPT (``sharegpt_prompt``, ``sharegpt_output``).
    """

    kind: str
    low: int
    high: int
    median: float = 0.0
    sigma: float = 0.0

    def __post_init__(self):
        if self.kind not in ("fixed", "uniform", "lognormal"):
            raise ValueError(f"unknown length distribution {self.kind!r} (fixed, uniform, lognormal)")
        if not 1 <= self.low <= self.high:
            raise ValueError(f"lengths need 1 <= low <= high, got {self.low}..{self.high}")

    @classmethod
    def fixed(cls, n: int) -> LengthDist:
        return cls("fixed", n, n)

    @classmethod
    def uniform(cls, low: int, high: int) -> LengthDist:
        return cls("uniform", low, high)

    @classmethod
    def lognormal(cls, median: float, sigma: float, low: int, high: int) -> LengthDist:
        return cls("lognormal", low, high, float(median), float(sigma))

    @classmethod
    def sharegpt_prompt(cls, low: int = 4, high: int = 1024) -> LengthDist:
        return cls.lognormal(median=120.0, sigma=1.1, low=low, high=high)

    @classmethod
    def sharegpt_output(cls, low: int = 4, high: int = 1024) -> LengthDist:
        return cls.lognormal(median=180.0, sigma=0.9, low=low, high=high)

    def sample(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return self.low
        if self.kind == "uniform":
            return rng.randint(self.low, self.high)
        n = round(math.exp(rng.gauss(math.log(self.median), self.sigma)))
        return min(self.high, max(self.low, n))


@dataclass(slots=True)
class Workload:
    """``num_requests`` seeded requests over a vocabulary of ``vocab`` token ids.

    ``stop_token`` is every request's stop token (``None``: none); ``stop_prob``
    makes it frequent in the prompts (each prompt token is it with that
    probability), so a model that echoes its context stops early and often.
    ``sampling`` is given to a share ``sampled_share`` of the requests (drawn from the seed), each
    with its own seed ``sampling.seed + id``; the others decode greedily (``sampling`` None).
    """

    num_requests: int
    rate: float | None = None
    prompt_len: LengthDist = field(default_factory=lambda: LengthDist.fixed(16))
    output_len: LengthDist = field(default_factory=lambda: LengthDist.fixed(16))
    vocab: int = 1000
    stop_token: int | None = None
    stop_prob: float = 0.0
    seed: int = 0
    sampling: SamplingParams | None = None
    sampled_share: float = 1.0

    def __post_init__(self):
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"a Poisson rate must be > 0 requests/s, got {self.rate}")
        if self.stop_token is not None and not 0 <= self.stop_token < self.vocab:
            raise ValueError(f"stop token {self.stop_token} outside the vocabulary of {self.vocab}")
        if not 0 <= self.sampled_share <= 1:
            raise ValueError(f"sampled_share is a share of the requests in [0, 1], got {self.sampled_share}")

    def _token(self, rng: random.Random) -> int:
        if self.stop_token is not None and rng.random() < self.stop_prob:
            return self.stop_token
        return rng.randrange(self.vocab)

    def requests(self) -> list[Request]:
        """Every request, in arrival order (ids ``0..num_requests-1``)."""
        rng, arrival_rng, share_rng = (random.Random(self.seed + k) for k in range(3))
        stops = frozenset() if self.stop_token is None else frozenset({self.stop_token})
        out, now = [], 0.0
        for i in range(self.num_requests):
            if self.rate is not None and i > 0:
                now += arrival_rng.expovariate(self.rate)
            prompt = tuple(self._token(rng) for _ in range(self.prompt_len.sample(rng)))
            req = Request(i, prompt, self.output_len.sample(rng), stops, arrival=now)
            if self.sampling is not None and share_rng.random() < self.sampled_share:
                req.sampling = dataclasses.replace(self.sampling, seed=self.sampling.seed + i)
            out.append(req)
        return out


@dataclass(slots=True)
class ClosedLoop:
    """Keep ``in_flight`` requests of ``workload`` outstanding: a new one arrives when one finishes.

    >>> loop = ClosedLoop(Workload(num_requests=3), in_flight=2)
    >>> [r.id for r in loop.start()], [r.id for r in loop.on_finish(now=1.5)], loop.on_finish(now=2.0)
    ([0, 1], [2], [])
    """

    workload: Workload
    in_flight: int
    _queue: list = field(default_factory=list, repr=False)

    def start(self) -> list[Request]:
        """The first ``in_flight`` requests, all arriving at time 0."""
        self._queue = self.workload.requests()[::-1]
        return [self._next(0.0) for _ in range(min(self.in_flight, len(self._queue)))]

    def on_finish(self, now: float) -> list[Request]:
        """One request finished at ``now``: the one that takes its place (none once the workload ran out)."""
        return [self._next(now)] if self._queue else []

    def _next(self, now: float) -> Request:
        req = self._queue.pop()
        req.arrival = now
        return req
