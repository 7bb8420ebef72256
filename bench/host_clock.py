"""The cost model's host figures measured the way it models them: a host clock around each API call, unprofiled.

The profiled steps (``bench/profiler.py``) give the device figures, but the
host duration of a CUDA API call under CUPTI is not what the call costs
without it: at 1932897 the profiled ``cudaGraphLaunch`` read 602 us where the
kernel trace showed a 4-6 us draft->verify gap.  So the ``issue.*`` figures of
``costs.json`` come from here instead: ``time.perf_counter_ns`` read right
before and right after one call, many repeats, the median, with no profiler
active (the sweep runs this next to ``bare_spans``, before the kernel-level
pass has started CUPTI in the process).  The stream is synchronized before
every timed call, so a launch never waits for room in a full queue.

Per (width, batch), once, on the engine of its first timed run:

* ``issue.graph_replay``: ``replay()`` of the engine's draft graph and of its
  bare target forward graph (the graphs ``bare_spans`` times; the boundaries
  end in one or the other);
* ``issue.h2d`` / ``issue.d2h``: ``copy_(non_blocking=True)`` between a pinned
  host tensor and a device tensor of each step buffer's shape and dtype (the
  buffers the boundaries copy: tokens, positions, slots, KV lengths, block
  table rows, tiling fields, ...);
* ``issue.event_record``: ``Event.record()`` on the current stream;
  ``issue.event_wait``: ``Stream.wait_event()`` of a recorded event;
* ``issue.device_kernel``: a one-element ``add_`` (torch's dispatch and the
  kernel launch);
* ``host_family.<family>``: the torch semantics a host-serial step runs on
  the host (``baseline``'s ``host_range`` marks: the head update, and the MTP
  chain's acceptance and next-draft preparation), each call over a fresh host
  copy of the engine's step buffers.  The profiled ranges of the same work
  stay in the cost file under ``measured`` (``profiled.host_family.*``).

Per timed run of a mode whose host waits for each step (``compile``'s read-back,
``baseline``'s host tail): ``boundary.<mode>.host_turnaround``, the engine's
own host clock in the timed steps (``RunResult.host_turnaround_us``): from the
end of that work to the call that launches the next draft graph (the launch
itself is ``issue.graph_replay``).

On the CPU the same code runs the CPU's equivalents: ``copy_`` between CPU
tensors of the step buffers' shapes (``h2d`` / ``d2h``) and the ``add_`` run
in line (``device_kernel``); events and graphs do not exist there, so those
figures are listed under ``not_measured`` with the reason.
"""

from __future__ import annotations

import time

import torch

from ..engine.graphs import TAIL_FAMILIES, head_update, tail_family

__all__ = ["METHOD", "REPEATS", "TURNAROUND_METHOD", "HostClock", "measure", "profiler_active"]

REPEATS = 200  # timed calls per figure and size
HEAD_FAMILY = "spec_verify_head_update"  # the host-serial head (a hybrid target's included), as baseline marks it
HOST_FAMILY_METHOD = {
    f"host_family.{f}": f"perf_counter_ns around {f}'s torch semantics on a fresh host copy of the step buffers"
    for f in (HEAD_FAMILY, *TAIL_FAMILIES)
}
WARMUP = 5  # untimed calls first (first-call costs, allocator)
METHOD = {
    "cuda": {
        "issue.graph_replay": "perf_counter_ns around CUDAGraph.replay() of the draft graph and the bare forward graph",
        "issue.h2d": "perf_counter_ns around Tensor.copy_(non_blocking=True), pinned host -> device, each step buffer",
        "issue.d2h": "perf_counter_ns around Tensor.copy_(non_blocking=True), device -> pinned host, each step buffer",
        "issue.event_record": "perf_counter_ns around torch.cuda.Event.record() on the current stream",
        "issue.event_wait": "perf_counter_ns around torch.cuda.Stream.wait_event() of a recorded event",
        "issue.device_kernel": "perf_counter_ns around a one-element Tensor.add_ on the device (dispatch + launch)",
        **HOST_FAMILY_METHOD,
    },
    "cpu": {
        "issue.h2d": "cpu: perf_counter_ns around Tensor.copy_ between CPU tensors of each step buffer's shape",
        "issue.d2h": "cpu: perf_counter_ns around Tensor.copy_ between CPU tensors of each step buffer's shape",
        "issue.device_kernel": "cpu: perf_counter_ns around a one-element Tensor.add_ run in line",
        **HOST_FAMILY_METHOD,
    },
}
TURNAROUND_METHOD = (
    "perf_counter_ns in the timed steps (no profiler): from the end of the mode's host work after the verification "
    "(its read-back returned; baseline: its host tail issued) to the call that launches the next draft graph"
)
NOT_ON_CPU = {
    k: "not measured on cpu: the CPU has no streams, events or graphs (its ops run in line)"
    for k in ("issue.graph_replay", "issue.event_record", "issue.event_wait")
}


def profiler_active() -> bool:
    """Whether a torch profiler is running now (its figures would not be the unprofiled ones)."""
    enabled = getattr(torch.autograd.profiler, "_is_profiler_enabled", False)
    return bool(enabled() if callable(enabled) else enabled)


def _timed(call, sync, repeats: int) -> list[float]:
    """``repeats`` host durations (us) of ``call()``, each after ``sync()``, after ``WARMUP`` untimed calls."""
    for _ in range(WARMUP):
        sync()
        call()
    out = []
    clock = time.perf_counter_ns
    for _ in range(repeats):
        sync()
        t0 = clock()
        call()
        out.append((clock() - t0) / 1e3)
    sync()
    return out


def _copies(bufs: dict, cuda: bool, device, sync, repeats: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"issue.h2d": [], "issue.d2h": []}
    for t in bufs.values():
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        host = torch.zeros(t.shape, dtype=t.dtype, pin_memory=cuda)
        dev = torch.zeros(t.shape, dtype=t.dtype, device=device)
        out["issue.h2d"] += _timed(lambda: dev.copy_(host, non_blocking=True), sync, repeats)
        out["issue.d2h"] += _timed(lambda: host.copy_(dev, non_blocking=True), sync, repeats)
    return out


def _fresh(call, host: dict, repeats: int) -> list[float]:
    """``_timed`` of ``call(b)``, each call over its own copy ``b`` of ``host`` (the semantics write their buffers
    in place), made untimed before it."""
    copy: dict = {}
    fresh = lambda: copy.update(b={n: t.clone() for n, t in host.items()})  # noqa: E731
    return _timed(lambda: call(copy["b"]), fresh, repeats)


@torch.inference_mode()
def host_families(engine, repeats: int = REPEATS) -> dict[str, list[float]]:
    """``host_family.*`` samples (us): what a host-serial step of ``engine``'s shape runs on the host, timed
    unprofiled over host copies of its step buffers (the values of its last step)."""
    host = {n: t.detach().cpu().clone() for n, t in engine.bufs.items() if isinstance(t, torch.Tensor)}
    bs, linear = engine.block_size, getattr(engine, "state", None) is not None
    out = {f"host_family.{HEAD_FAMILY}": _fresh(lambda b: head_update(b, bs, linear), host, repeats)}
    for f in engine.proposer.host_families:  # the proposer's marked host tail (the MTP chain's; a block's none)
        out[f"host_family.{f}"] = _fresh(lambda b, f=f: tail_family(f, b, bs), host, repeats)
    return out


@torch.inference_mode()
def measure(engine, repeats: int = REPEATS) -> dict[str, list[float]]:
    """The host-clock samples (us) of one engine's API calls, keyed like the cost file (``issue.*``)."""
    if profiler_active():
        return {}
    device = engine.device
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    out = _copies(engine.bufs, cuda, device, sync, repeats)
    one = torch.zeros(1, device=device)
    out["issue.device_kernel"] = _timed(lambda: one.add_(1.0), sync, repeats)
    if not cuda:
        return out
    stream = torch.cuda.current_stream(device)
    ev = torch.cuda.Event()
    out["issue.event_record"] = _timed(lambda: ev.record(stream), sync, repeats)
    ev.record(stream)
    out["issue.event_wait"] = _timed(lambda: stream.wait_event(ev), sync, repeats)
    with engine.state_kept():  # the replays write the KV cache and the step buffers
        graphs = [engine.draft_graph, engine.graph(engine.forward_only)]
        out["issue.graph_replay"] = [us for g in graphs for us in _timed(g, sync, repeats)]
        del graphs
    return out


class HostClock:
    """The sweep's host-clock pass: per batch, the samples of every (width, batch) measured so far."""

    def __init__(self, enabled: bool, repeats: int = REPEATS):
        self.enabled, self.repeats = enabled, repeats
        self.samples: dict[int, dict[str, list[float]]] = {}
        self.device_type = "cpu"
        self.skipped: dict[str, str] = {}  # figures this pass could not take, and why

    def measure(self, engine) -> None:
        """Add ``engine``'s figures to its batch's (nothing when disabled or under a profiler)."""
        if not self.enabled:
            return
        self.device_type = engine.device.type
        pool = self.samples.setdefault(engine.batch, {})
        got = measure(engine, self.repeats)
        if got and engine.sampling is None:  # a sampled step's host rule reads the vocabulary pass's weights
            try:
                got.update(host_families(engine, self.repeats))
            except (LookupError, RuntimeError, TypeError, ValueError) as err:  # the profiled ranges stand
                self.skipped["host_family.*"] = f"host clock failed on {type(engine.strategy).__name__}: {err}"
        for k, v in got.items():
            pool.setdefault(k, []).extend(v)

    def turnaround(self, mode: str, batch: int, samples: list[float]) -> None:
        """A timed run's ``host_turnaround_us`` as ``boundary.<mode>.host_turnaround`` of its batch."""
        if self.enabled and samples:
            self.samples.setdefault(batch, {}).setdefault(f"boundary.{mode}.host_turnaround", []).extend(samples)

    def provenance(self) -> dict:
        """How each host-clock figure was taken (``method``) and which were not (``not_measured``)."""
        cuda = self.device_type == "cuda"
        turns = sorted({k for pool in self.samples.values() for k in pool if k.endswith(".host_turnaround")})
        return {
            "method": dict(METHOD["cuda" if cuda else "cpu"]) | dict.fromkeys(turns, TURNAROUND_METHOD),
            "not_measured": ({} if cuda else dict(NOT_ON_CPU)) | self.skipped,
            "repeats": self.repeats,
        }
