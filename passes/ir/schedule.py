"""The schedule-aware interpreter: a boundary graph run in one order its streams, events and syncs allow.

The host walks the program: it runs host ops itself and issues device ops
onto their streams' queues; each device stream runs the op at the head of its
queue whenever it likes.  At every step one enabled move is picked
(``choose(n)`` returns an index below ``n``):

* the host's next op: a device op is enqueued; a host op runs, except a host
  sync, which waits until the ops that last wrote what it reads (before it
  in program order) have run;
* a stream's head op: it runs, except an event wait, which waits until the
  record of its event last issued before it has run.

An op runs atomically on the current memory, and a value nothing has written
yet reads as zeros.  So a consumer that runs before its producer (a missing
wait, an early hoist), a write that lands before an earlier read (WAR) or
two unordered writes (WAW) change the values.  For a race-free graph every
schedule gives the values of the sequential ``interpret``; the pass tests
check that on "before" and "after" over many schedules drawn by hypothesis::

    rng = random.Random(7)
    differences(before, after, random_choice(rng))   # [] when the pass kept the meaning
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch

from .core import HOST, BoundaryGraph, BoundaryGraphError, OpKind, Placement
from .interpreter import differing, execute, interpret, random_inputs

Choose = Callable[[int], int]


def random_choice(rng: random.Random) -> Choose:
    """Pick uniformly among the enabled moves (hypothesis's ``st.randoms()`` shrinks these choices)."""
    return lambda n: rng.randrange(n)


def host_first(n: int) -> int:
    """The host runs ahead while it can: the schedule furthest from the sequential one."""
    return 0


@dataclass
class ScheduleRun:
    env: dict[str, torch.Tensor]
    trace: list[str] = field(default_factory=list)  # ops in the order they ran (issues are not listed)
    writer: dict[str, str] = field(default_factory=dict)  # value -> the op that wrote it last in this run


def _waits(graph: BoundaryGraph) -> dict[int, set[int]]:
    """For each sync and event wait, the program indices of the ops it waits for."""
    last_writer: dict[str, int] = {}
    out: dict[int, set[int]] = {}
    for i, o in enumerate(graph.ops):
        if o.kind in (OpKind.HOST_SYNC, OpKind.EVENT_WAIT):
            out[i] = {last_writer[v] for v in o.reads if v in last_writer}
        for v in o.writes:
            last_writer[v] = i
    return out


def run_schedule(graph: BoundaryGraph, inputs: Mapping[str, torch.Tensor], choose: Choose) -> ScheduleRun:
    """Run ``graph`` in the schedule ``choose`` picks; the final memory, the run order, the last writers."""
    env = {
        k: torch.zeros(tuple(int(s) for s in v.shape), dtype=getattr(torch, v.dtype))
        for k, v in graph.values.items()
        if v.placement is not Placement.EVENT
    }
    env.update({k: t.clone() for k, t in inputs.items()})
    run = ScheduleRun(env)
    waits = _waits(graph)
    done: set[int] = set()
    queues: dict[str, deque[int]] = {s: deque() for s in graph.streams() if s != HOST}
    pc = 0

    def step(i: int) -> None:
        o = graph.ops[i]
        execute(graph, o, env)
        run.trace.append(o.name)
        run.writer.update((w, o.name) for w in o.writes)
        done.add(i)

    while pc < len(graph.ops) or any(queues.values()):
        moves: list[tuple[str, int]] = []
        if pc < len(graph.ops) and (graph.ops[pc].kind is not OpKind.HOST_SYNC or waits[pc] <= done):
            moves.append((HOST, pc))
        for s, q in queues.items():
            if q and (graph.ops[q[0]].kind is not OpKind.EVENT_WAIT or waits[q[0]] <= done):
                moves.append((s, q[0]))
        if not moves:
            blocked = graph.ops[pc].name if pc < len(graph.ops) else "(host done)"
            heads = [graph.ops[q[0]].name for q in queues.values() if q]
            raise BoundaryGraphError(
                f"{graph.name}: no op can run: the host waits at '{blocked}', the streams at {heads}",
                op=heads[0] if heads else blocked,
            )
        k = choose(len(moves))
        if not 0 <= k < len(moves):
            raise ValueError(f"choose({len(moves)}) returned {k}")
        where, i = moves[k]
        if where == HOST:
            pc += 1
            if graph.ops[i].kind.on_host:
                step(i)
            else:
                queues[graph.ops[i].stream].append(i)
        else:
            queues[where].popleft()
            step(i)
    return run


def differences(before: BoundaryGraph, after: BoundaryGraph, choose: Choose, seed: int = 0) -> list[str]:
    """``before``'s outputs whose values differ when ``after`` runs in the schedule ``choose`` picks.

    ``before`` runs sequentially: it is the definition of what the boundary computes.
    """
    inputs = random_inputs(before, seed)
    return differing(before.outputs, interpret(before, inputs), run_schedule(after, inputs, choose).env)


def check_schedule(before: BoundaryGraph, after: BoundaryGraph, choose: Choose, seed: int = 0) -> None:
    """Raise ``BoundaryGraphError`` naming the output that differs and the op of ``after`` that wrote it."""
    inputs = random_inputs(before, seed)
    want = interpret(before, inputs)
    run = run_schedule(after, inputs, choose)
    bad = differing(before.outputs, want, run.env)
    if bad:
        op = run.writer.get(bad[0])
        raise BoundaryGraphError(
            f"{after.name}: output '{bad[0]}' differs from the graph before the rewrite; op '{op}' wrote it "
            f"in the schedule [{', '.join(run.trace)}] ({len(bad)} output(s) differ: {', '.join(bad)})",
            op=op,
        )


def search(
    before: BoundaryGraph, after: BoundaryGraph, tries: int = 200, seed: int = 0
) -> tuple[int, list[str]] | None:
    """The first of ``tries`` random schedules of ``after`` whose outputs differ from ``before``'s:
    ``(schedule seed, differing outputs)``, or None when all agree."""
    for k in range(tries):
        bad = differences(before, after, random_choice(random.Random(k)), seed)
        if bad:
            return k, bad
    return None
