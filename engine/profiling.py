"""A few decode steps under ``torch.profiler``, for the kernel-level boundary figures.

``StepProfiler`` is what the decode loop talks to: ``at(i)`` starts the
profiler (CPU and CUDA activities) at the first profiled step, ``phase(name,
i)`` marks a host phase with ``record_function(phase_name(name, i))`` while
the profiler runs (a no-op otherwise, so unprofiled steps carry no ranges),
and leaving the ``with`` block stops it and keeps the Chrome trace as a dict
(``trace``).  The bench's own traces of the bare graphs (``forward_trace``,
``bare_trace``) are ``bench/bare.py``'s.

``host_range(family)`` marks the host's own run of a family's torch
semantics (the host-serial mode's updates) while a profiler runs; the
calibration (``bench/calibration.py``) reads those marks as the host compute cost.

CUPTI is left initialized after a session (PyTorch's default), which slows
later launches; the bench therefore profiles only after every timed run.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

import torch

__all__ = [
    "HOST_RANGE_PREFIX",
    "PHASE_PREFIX",
    "DeviceMarks",
    "phase_name",
    "StepProfiler",
    "activities",
    "chrome_trace",
    "host_range",
    "phase_range",
]

PHASE_PREFIX = "specgen::"
HOST_RANGE_PREFIX = "specgen::host."  # not a decode phase: kernel_timeline's phase names have no '.'


def phase_name(phase: str, step: int) -> str:
    """The ``record_function`` name that marks ``phase`` of decode step ``step``."""
    return f"{PHASE_PREFIX}{phase}#{step}"


def _mark(name: str):
    """A ``record_function`` range named ``name`` while a profiler runs; nothing otherwise."""
    if not getattr(torch.autograd.profiler, "_is_profiler_enabled", True):
        return contextlib.nullcontext()
    return torch.profiler.record_function(name)


class DeviceMarks:
    """While active (``with DeviceMarks(device) as marks``), every ``phase_range`` also records a timing event
    on the current stream as it opens and as it closes: each range's extent on the device without a profiler
    (CUPTI slows the host's launches and so moves the idle it measures).  An opening event completes when the
    stream reaches it: when the work before it is done and the host has got there, whichever is later; so
    the time between one range's closing event and the next range's opening one is device idle that the
    host's lateness caused.  On the CPU the marks are the host's clock (there is no device to wait for).

    ``extents()`` after the run: ``[(phase, step, start_us, end_us)]``, one per range, from the first mark."""

    active: DeviceMarks | None = None

    def __init__(self, device: torch.device):
        self.cuda = torch.device(device).type == "cuda"
        self.marks: list[tuple[str, int, object, object]] = []

    def __enter__(self) -> DeviceMarks:
        if DeviceMarks.active is not None:
            raise RuntimeError("device marks are already being taken")
        DeviceMarks.active = self
        return self

    def __exit__(self, *exc) -> None:
        DeviceMarks.active = None

    def _now(self):
        if not self.cuda:
            import time

            return time.perf_counter()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    @contextlib.contextmanager
    def range(self, phase: str, step: int):
        start = self._now()
        try:
            yield
        finally:
            self.marks.append((phase, step, start, self._now()))

    def extents(self) -> list[tuple[str, int, float, float]]:
        """Every range taken, in the order it closed: ``(phase, step, start_us, end_us)`` from the first mark.
        A step may hold several ranges of one phase (an iteration's prefill chunks): each is its own."""
        if not self.marks:
            return []
        if self.cuda:
            torch.cuda.synchronize()
            first = self.marks[0][2]
            at = lambda ev: first.elapsed_time(ev) * 1e3  # noqa: E731  ms -> us
        else:
            first = self.marks[0][2]
            at = lambda t: (t - first) * 1e6  # noqa: E731
        return [(phase, step, at(s), at(e)) for phase, step, s, e in self.marks]


def phase_range(phase: str, step: int):
    """A ``record_function`` mark of ``phase`` of step ``step`` (``phase_name``), only while a profiler runs; and
    the range's timing events while ``DeviceMarks`` are taken."""
    marks = DeviceMarks.active
    if marks is None:
        return _mark(phase_name(phase, step))
    stack = contextlib.ExitStack()
    stack.enter_context(marks.range(phase, step))
    stack.enter_context(_mark(phase_name(phase, step)))
    return stack


def host_range(family: str):
    """A ``record_function`` mark of the host running ``family``'s semantics, only while a profiler runs."""
    return _mark(HOST_RANGE_PREFIX + family)


def activities(device: torch.device) -> list:
    acts = [torch.profiler.ProfilerActivity.CPU]
    return acts + [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else acts


def chrome_trace(prof) -> dict:
    """A finished ``torch.profiler.profile``'s Chrome trace as a dict."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


class StepProfiler:
    """Profiles the decode steps from ``first`` on (``None``: none); see the module docstring.

    Seen on the H200 (torch 2.11, CUDA 13): the first profiled run of a process
    reports no kernels inside its graph replays (only the copies around them);
    every later run does, whatever its mode.  Callers that need the figures
    profile one throwaway run first (``bench_profile.KernelPass`` does).
    """

    def __init__(self, device: torch.device, first: int | None):
        self.device, self.first = device, first
        self._prof = None
        self.trace: dict | None = None

    def at(self, i: int) -> None:
        """Called before step ``i``: start profiling when it is the first profiled step."""
        if self.first is not None and i == self.first and self._prof is None:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # earlier steps' kernels stay out of the trace
            self._prof = torch.profiler.profile(activities=activities(self.device))
            self._prof.__enter__()

    def phase(self, name: str, i: int):
        """The context that marks phase ``name`` of step ``i`` (only while profiling)."""
        if self._prof is None:
            return contextlib.nullcontext()
        return torch.profiler.record_function(phase_name(name, i))

    def __enter__(self) -> "StepProfiler":
        return self

    def __exit__(self, *exc) -> None:
        if self._prof is None:
            return
        prof, self._prof = self._prof, None
        if self.device.type == "cuda" and exc[0] is None:
            torch.cuda.synchronize(self.device)
        prof.__exit__(*exc)
        if exc[0] is None:
            self.trace = chrome_trace(prof)
