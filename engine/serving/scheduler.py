"""The serving scheduler: plain data in (requests, produced tokens), plain data out (who runs this step).

Each step, running requests go first, oldest first: one still in its prefill
gets its next chunk (all chunks of a step share ``max_prefill_tokens``), one
past it a verify step, for which its table grows to ``len(prefix) + width``
positions.  When blocks run out the newest running request is preempted: its
blocks go back once its last step completed, it goes to the front of the
queue, and its prefix (prompt and tokens so far) is recomputed when it comes
back.  Then waiting requests that arrived are admitted while the batch, the
budget and the free blocks allow::

    >>> sched = Scheduler(BlockPool(num_blocks=9, block_size=4), width=2, max_batch=4, max_prefill_tokens=8)
    >>> sched.add(Request(0, prompt=(1, 2, 3), max_new_tokens=2))
    >>> out = sched.schedule(now=0.0); out.prefill
    (PrefillChunk(id=0, start=0, tokens=(1, 2, 3), last=True),)
    >>> sched.update(out, {0: [7]}); sched.update(sched.schedule(now=1.0), {0: [8, 9]})
    >>> sched.finished[0].output, sched.done
    ([7, 8], True)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .block_pool import BlockPool
from .requests import Request, RequestState

__all__ = ["PrefillChunk", "Scheduler", "SchedulerOutput"]


@dataclass(slots=True, frozen=True)
class PrefillChunk:
    """Prefill ``tokens`` of request ``id`` at positions ``start...``; the ``last`` chunk produces one token."""

    id: int
    start: int
    tokens: tuple[int, ...]
    last: bool


@dataclass(slots=True, frozen=True)
class SchedulerOutput:
    """What step ``step`` runs: ``prefill`` chunks, ``verify`` requests (ids), and who was ``preempted``.

    ``tables`` holds the block table of every request the step runs.
    """

    step: int
    prefill: tuple[PrefillChunk, ...]
    verify: tuple[int, ...]
    preempted: tuple[int, ...]
    tables: dict = field(default_factory=dict)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(c.id for c in self.prefill) + self.verify

    @property
    def prefill_tokens(self) -> int:
        return sum(len(c.tokens) for c in self.prefill)


@dataclass(slots=True)
class Scheduler:
    """Continuous batching over ``pool`` with verify steps ``width`` wide.

    With ``auto_retire`` a step's blocks are retired as soon as its tokens come
    back (``update``); without it the runner calls ``complete(step)`` when the
    step has finished on the device, and released blocks wait for it.

    ``read_lag`` (0 or 1): how many steps may be scheduled past the last one whose
    tokens came back.  With 1, step ``k + 1`` is scheduled before step ``k``'s
    verify tokens are known (a prefill's token is known when its chunk returns:
    ``take_prefill``): a request in the unread step grows its table for the
    largest step it may have taken (``width`` more positions), one that finishes
    at step ``k`` gives its blocks back after step ``k + 1`` (which it ran in),
    and whatever step ``k + 1`` produced for it is dropped.

    A prefill's token may be read late too (``take_prefill(..., late=ids)``, then
    ``take_first`` when it comes back): the request verifies from the next step on, its
    table grown for one token more than the host knows, unless its budget ends at that
    token (it waits for the read, so no step runs past its budget); a stop token there
    finishes it as a lagged verify step's would.
    """

    pool: BlockPool
    width: int
    max_batch: int
    max_prefill_tokens: int
    auto_retire: bool = True
    read_lag: int = 0
    step: int = -1
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)  # admission order, oldest first
    finished: list = field(default_factory=list)
    requests: dict = field(default_factory=dict)
    num_preemptions: int = 0
    _last_step: dict = field(default_factory=dict, repr=False)
    _updated: int = -1
    _prefilled: int = -1
    _verified: dict = field(default_factory=dict, repr=False)  # step -> its verify ids, until its tokens come back
    _first: dict = field(default_factory=dict, repr=False)  # request id -> the step whose prefill token is unread

    def __post_init__(self):
        if self.width < 1 or self.max_batch < 1 or self.max_prefill_tokens < 1:
            raise ValueError("width, max_batch and max_prefill_tokens must be >= 1")
        if self.read_lag not in (0, 1):
            raise ValueError(f"read_lag is 0 or 1, got {self.read_lag}")

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running

    def add(self, req: Request) -> None:
        """Queue ``req``; one that could never fit in the pool is refused."""
        if req.id in self.requests:
            raise ValueError(f"request {req.id} added twice")
        need = self.pool.blocks_for(len(req.prompt) + req.max_new_tokens + self.width * (1 + self.read_lag))
        if need > self.pool.capacity:
            raise ValueError(f"request {req.id} may need {need} blocks; the pool has {self.pool.capacity}")
        self.requests[req.id] = req
        self.waiting.append(req)

    def schedule(self, now: float) -> SchedulerOutput:
        """The next step: every request it runs has its table grown for what the step writes."""
        if self.step - self._updated > self.read_lag or self._prefilled < self.step:
            raise RuntimeError(f"step {self._updated + 1} was scheduled but its tokens never came back (update)")
        self.step += 1
        unread = self.unread
        prefill, verify, preempted, budget = [], [], [], self.max_prefill_tokens
        i = 0
        while i < len(self.running):
            req = self.running[i]
            n = min(req.prefill_len - req.num_computed, budget) if req.in_prefill else 0
            first = req.id in self._first  # its prefill's token is on the device only
            if (req.in_prefill and n == 0) or (first and len(req.output) + 1 >= req.max_new_tokens):
                i += 1  # nothing to prefill this step; or its budget ends at the unread token: wait for it
                continue
            ahead = self.width * (1 + (req.id in unread))  # a step not yet read may have added up to width tokens
            ahead += first
            # a chunk before the last also writes the MTP head's row at its next position (prefill.py)
            more = int(n < req.prefill_len - req.num_computed)
            positions = req.num_computed + n + more if req.in_prefill else req.length + ahead
            if not self._make_room(req, positions, preempted):
                i += req.state is RequestState.RUNNING  # stalled: it waits for blocks still in flight
                continue
            self._run(req, positions)
            if n:
                prefill.append(self._chunk(req, n))
                budget -= n
            else:
                verify.append(req.id)
            i += 1
        while self.waiting and len(self.running) < self.max_batch and budget > 0:
            req = self.waiting[0]
            if req.arrival > now or req.id in preempted:
                break
            n = min(req.resume_len, budget)
            positions = n + int(n < req.resume_len)
            if not self.pool.can_grow(req.id, positions):
                break
            self.waiting.popleft()
            req.state, req.num_computed, req.prefill_len = RequestState.RUNNING, 0, req.resume_len
            self.running.append(req)
            self._run(req, positions)
            prefill.append(self._chunk(req, n))
            budget -= n
        tables = {rid: self.pool.table(rid) for rid in [c.id for c in prefill] + verify}
        self._verified[self.step] = tuple(verify)
        return SchedulerOutput(self.step, tuple(prefill), tuple(verify), tuple(preempted), tables)

    @property
    def unread(self) -> set:
        """Requests of the verify steps before the newest scheduled one whose tokens have not come back yet."""
        return {rid for s, ids in self._verified.items() if self._updated < s < self.step for rid in ids}

    @property
    def unread_first(self) -> set:
        """Requests whose prefill's token has not come back yet (``take_prefill``'s ``late``)."""
        return set(self._first)

    def last_step(self, rid: int) -> int:
        """The newest step request ``rid`` was scheduled into (the last that could write its blocks)."""
        return self._last_step.get(rid, -1)

    def take_prefill(self, out: SchedulerOutput, produced: dict, late=()) -> None:
        """The prefill chunks of step ``out.step`` ran; the last ones produced ``produced[id]`` (one token each),
        or, for the ids in ``late``, a token the host reads later (``take_first``)."""
        if out.step != self._prefilled + 1:
            raise RuntimeError(f"prefill of step {out.step} came back after step {self._prefilled}'s; in order only")
        drawn = {c.id for c in out.prefill if c.last and self.requests[c.id].prefill_len == self.requests[c.id].length}
        stray = set(late) - drawn | set(late) & set(produced)
        if stray:
            raise ValueError(f"requests {sorted(stray)} have no token of step {out.step} to read late")
        self._prefilled = out.step
        for chunk in out.prefill:
            req, toks = self.requests[chunk.id], list(produced.get(chunk.id, ()))
            if chunk.id in late:
                req.num_computed += len(chunk.tokens)
                self._first[chunk.id] = out.step
                continue
            if len(toks) != int(chunk.last and req.prefill_len == req.length):  # else a resumed sampled one
                raise ValueError(f"a {'last' if chunk.last else 'middle'} prefill chunk produced {len(toks)} tokens")
            req.num_computed += len(chunk.tokens)
            self._take(req, toks, out.step)

    def take_first(self, out: SchedulerOutput, produced: dict) -> None:
        """The tokens that step ``out.step``'s prefills left to be read late came back: ``produced[id]``, one each."""
        want = {rid for rid, s in self._first.items() if s == out.step}
        if set(produced) != want or any(len(list(t)) != 1 for t in produced.values()):
            raise ValueError(f"step {out.step} left prefill tokens of {sorted(want)} to read, got {produced}")
        for rid in sorted(want):
            del self._first[rid]
            self._take(self.requests[rid], list(produced[rid]), out.step)

    def update(self, out: SchedulerOutput, produced: dict) -> None:
        """Step ``out.step`` produced ``produced[id]`` tokens per request: append, finish, free.

        Its prefill chunks too, unless ``take_prefill`` took them already.  Tokens of a request
        that finished at an earlier step (it ran in this one before that was known) are dropped.
        """
        if out.step != self._updated + 1:
            raise RuntimeError(f"tokens of step {out.step} came back after step {self._updated}'s; in order only")
        if self._prefilled < out.step:
            self.take_prefill(out, produced)
        if any(s <= out.step for s in self._first.values()):
            raise RuntimeError(f"step {out.step}'s tokens came back before its prefills' (take_first)")
        self._updated = out.step
        self._verified.pop(out.step, None)
        for rid in out.verify:
            req, toks = self.requests[rid], list(produced.get(rid, ()))
            if not 1 <= len(toks) <= self.width:
                raise ValueError(f"a verify step {self.width} wide produced {len(toks)} tokens for request {rid}")
            if not req.finished:
                self._take(req, toks, out.step)
        if self.auto_retire:
            self.pool.retire(out.step)

    def complete(self, step: int) -> None:
        """Step ``step`` and every one before it finished on the device (runners without ``auto_retire``)."""
        self.pool.retire(step)

    def _take(self, req: Request, toks: list, step: int) -> None:
        running = req.state is RequestState.RUNNING  # else preempted after the step ran: its prefix grows
        if req.append(toks):
            (self.running if running else self.waiting).remove(req)
            self.finished.append(req)
            self.pool.release(req.id, after_step=max(step, self.last_step(req.id)))
        elif toks and running:
            req.num_computed = req.length - 1  # the last token is the next step's input

    def _chunk(self, req: Request, n: int) -> PrefillChunk:
        start = req.num_computed
        toks = req.prefix[start : start + n]
        return PrefillChunk(req.id, start, toks, last=start + n >= req.prefill_len)

    def _run(self, req: Request, positions: int) -> None:
        self.pool.grow(req.id, positions)
        self._last_step[req.id] = self.step

    def _make_room(self, req: Request, positions: int, preempted: list) -> bool:
        """Free blocks for ``req`` by preempting the newest running requests; ``False`` if it cannot run now."""
        while not self.pool.can_grow(req.id, positions):
            if self.pool.free_count + self.pool.pending_count >= self.pool.missing(req.id, positions):
                return False  # enough blocks come back once the steps in flight complete
            victim = self.running[-1]
            self._preempt(victim)
            preempted.append(victim.id)
            if victim is req:
                return False
        return True

    def _preempt(self, req: Request) -> None:
        self.running.remove(req)
        self.pool.release(req.id, after_step=self._last_step.get(req.id, -1))
        req.state, req.num_computed, req.prefill_len = RequestState.PREEMPTED, 0, 0
        req.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
