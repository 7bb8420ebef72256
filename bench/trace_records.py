"""A profiled run's device records: the Chrome trace's kernels, copies and sets, and a step's records by phase
(``kernel_timeline`` attributes them)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DEVICE_CATS", "DeviceRecord", "StepKernels", "load_trace", "device_records"]

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    name: str
    cat: str
    start: float  # us
    end: float
    correlation: int | None
    stream: int | None = None

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass(slots=True)
class StepKernels:
    draft: list[DeviceRecord] = field(default_factory=list)
    verify: list[DeviceRecord] = field(default_factory=list)


def load_trace(path_or_dict) -> list[dict]:
    """The ``traceEvents`` of a Chrome trace (a path, ``.json`` or ``.json.gz``, a dict or a list of events)."""
    data = path_or_dict
    if isinstance(path_or_dict, (str, Path)):
        path = Path(path_or_dict)
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        data = json.loads(raw)
    if isinstance(data, dict):
        data = data.get("traceEvents", [])
    return [e for e in data if isinstance(e, dict) and e.get("ph") == "X"]


def device_records(events: list[dict]) -> list[DeviceRecord]:
    """Every kernel, memcpy and memset, in start order."""
    out = []
    for e in events:
        if e.get("cat") in DEVICE_CATS:
            ts = float(e["ts"])
            args = e.get("args") or {}
            stream = args.get("stream", e.get("tid"))
            out.append(
                DeviceRecord(
                    e.get("name", "?"),
                    e["cat"],
                    ts,
                    ts + float(e.get("dur", 0.0)),
                    args.get("correlation"),
                    stream if isinstance(stream, int) else None,
                )
            )
    return sorted(out, key=lambda r: r.start)
