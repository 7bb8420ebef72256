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


def phase_range(phase: str, step: int):
    """A ``record_function`` mark of ``phase`` of step ``step`` (``phase_name``), only while a profiler runs."""
    return _mark(phase_name(phase, step))


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
