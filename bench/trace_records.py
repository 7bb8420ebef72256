"""A profiled run's device records: the Chrome trace's kernels, copies and sets, and a step's records by phase
(``kernel_timeline`` attributes them)."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DEVICE_CATS", "DeviceRecord", "StepKernels", "load_trace", "device_records", "launches", "idle_before"]

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


def launches(records) -> list[list[DeviceRecord]]:
    """``records`` grouped by the launch that issued them (a graph replay: one correlation id), each group in
    start order, the groups in the order their first records start."""
    out: dict = {}
    for r in sorted(records, key=lambda r: r.start):
        out.setdefault(r.correlation, []).append(r)
    return list(out.values())


def idle_before(recs: list[DeviceRecord]) -> list[float]:
    """For each of a launch's records after its first (start order): how long after the latest end of the records
    before it it starts (0 where one of them still runs)."""
    busy, out = recs[0].end, []
    for r in recs[1:]:
        out.append(max(0.0, r.start - busy))
        busy = max(busy, r.end)
    return out
