"""The bench's kernel-level pass: every finished run again, a few steps under ``torch.profiler``.

After every timed run of a sweep (CUPTI stays initialized once a profiler
has run, which would slow the launches of timed runs after it), each
finished (depth, batch, mode) runs once more: the same prompts and
acceptance oracle, the warm-up steps, then ``profile_steps`` steps profiled
with their draft and verify phases marked.  The bare target forward graph,
profiled alone once per (depth, batch), gives the kernel-name sequence that
locates the forward (``kernel_timeline``); the draft graph and the bare
forward graph profiled back to back (``profiling.bare_trace``) give the
draft's name sequence (which finds a fused draft inside a verify phase) and
``bare_kernel_draft_to_verify_us``: the kernel-level gap with no boundary work
at all, the reference a mode's ``kernel_draft_to_verify_us`` is held to.
Each run's row gains the medians ``kernel_draft_to_verify_us``, ``head_us``
and ``kernel_verify_to_draft_us``, how the records were attributed, the bare
reference, and the name of its trace: the profiled steps' Chrome trace,
gzipped, with the forward's and the draft's kernel names under ``"specgen"``
so the figures can be recomputed from the file alone.  A draft whose own
computation follows the verification inside the step (the block drafts'
context projection, ``Proposer.draft_work_after_verify``) has that work
profiled alone too; its rows also get ``POST_VERIFY_FIELDS``: the
projection's span, the verify->draft gap outside it and the gap's device idle.

Every profiled run also gives the cost model's figures (``calibration``):
launch, copy, sync and in-graph costs, and the host-serial mode's host
compute.  ``KernelPass.calibration`` pools them into ``costs.json``.  On the
CPU only the host-serial runs are profiled (nothing else has host work to
measure) and the kernel-level figures stay empty.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import platform
import statistics
from pathlib import Path

import torch

from ..engine.acceptance import AcceptanceMix
from ..models.errors import EngineError
from . import calibration as cal
from . import host_bound
from . import kernel_timeline as kt
from .bare import bare_trace, forward_trace, work_trace
from .kernel_breakdown import VOCAB_KERNELS, step_breakdown
from .support import log, quiet_profiler, settled

__all__ = [
    "KERNEL_FIELDS",
    "POST_VERIFY_FIELDS",
    "KernelPass",
    "read_trace",
    "trace_name",
    "trace_projection",
    "write_trace",
]

KERNEL_FIELDS = ("kernel_draft_to_verify_us", "head_us", "kernel_verify_to_draft_us")
# a draft with its own work after the verification (the block drafts' context projection) also gets these
POST_VERIFY_FIELDS = kt.PROJECTION_FIGURES
HOST_SERIAL = "baseline"  # the mode whose host computes the boundary updates (profiled on the CPU too)


def trace_name(row: dict) -> str:
    """Where a run's trace goes, relative to the bench's output folder."""
    return f"traces/trace_{row['mode']}_d{row['depth']}_b{row['batch']}.json.gz"


def write_trace(
    path: Path, trace: dict, forward: list[str], row: dict, draft: list[str] = (), projection: list[str] = ()
) -> None:
    """``trace`` gzipped at ``path``, with the forward's, the draft's and the draft's post-verify work's
    (``projection``) kernel names and the run's key under ``"specgen"``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dict(
        trace,
        specgen={
            "forward_kernels": forward,
            "draft_kernels": list(draft),
            "projection_kernels": list(projection),
            "mode": row["mode"],
            "depth": row["depth"],
            "batch": row["batch"],
        },
    )
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(gzip.compress(json.dumps(data).encode(), compresslevel=6))
    os.replace(tmp, path)


def _saved(path: Path) -> tuple[dict, dict]:
    """A saved trace and the kernel names ``write_trace`` put under ``"specgen"``."""
    data = json.loads(gzip.decompress(Path(path).read_bytes()))
    return data, data.get("specgen") or {}


def read_trace(path: Path) -> tuple[list[dict], list[str], list[str]]:
    """A saved trace's complete events, the forward's kernel names and the draft's (empty in older traces)."""
    data, names = _saved(path)
    return kt.load_trace(data), list(names.get("forward_kernels") or []), list(names.get("draft_kernels") or [])


def trace_projection(path: Path) -> list[str]:
    """A saved trace's kernel names of the draft's own work after the verification (empty: none, or an older
    trace)."""
    return list(_saved(path)[1].get("projection_kernels") or [])


def figures(trace: dict, forward: list[str], draft: list[str] = (), projection: list[str] = ()) -> dict:
    """The kernel-level medians of one profiled run, how its records were attributed, and the step count;
    with ``projection`` also ``POST_VERIFY_FIELDS`` (``kernel_timeline.step_figures``)."""
    events = kt.load_trace(trace)
    steps, method = kt.attribute_with_method(events, draft)
    figs = host_bound.mark(kt.step_figures(steps, forward, projection), steps, forward, host_bound.launch_calls(events))
    out = host_bound.summarize(figs)  # the medians over the steps the host kept up with (``bench/host_bound.py``)
    out["kernel_attribution"] = method
    out["kernel_steps"] = sum(f["kernel_draft_to_verify_us"] is not None for f in figs)
    # every profiled step's gaps, in step order: a median hides a gap that differs from step to step
    for key in ("kernel_draft_to_verify_us", "kernel_verify_to_draft_us", "kernel_post_verify_us"):
        if key in out:
            out[key.replace("_us", "_steps_us")] = [round(f[key], 3) for f in figs if f.get(key) is not None]
    # per step, the device time of the records whose name holds a vocabulary-pass family's
    vocab = [sum(r.dur for r in s.draft + s.verify if any(n in r.name for n in VOCAB_KERNELS)) for s in steps.values()]
    vocab = [t for t in vocab if t > 0]
    if vocab:  # a sampled run: the vocabulary pass's device time per step
        out["vocab_kernel_us"] = round(statistics.median(vocab), 3)
    out["kernel_breakdown"] = step_breakdown(steps, forward)  # by part of the step and kind of kernel
    return out


def machine(c) -> dict:
    """The machine a calibration holds for: device, torch and CUDA versions, the host's processor."""
    return {
        "device": torch.cuda.get_device_name(c.device) if c.cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda if c.cuda else None,
        "host": platform.processor() or platform.machine(),
        "host_cores": os.cpu_count(),
    }


def model_shape(c) -> dict:
    """The model shape a calibration holds for: the target's dimensions, dtype, layout, widths and batches."""
    values = {f.name: getattr(c.model, f.name) for f in dataclasses.fields(c.model)}
    shape = {k: v for k, v in values.items() if type(v) in (int, str)}  # the dimensions and the name
    return dict(
        shape,
        dtype=str(c.dtype).split(".")[-1],
        tp=c.tp,
        draft=c.draft,
        block_size=c.block_size,
        block_table_width=c.block_table_width,
        widths=list(c.widths),
        batches=list(c.batches),
    )


class KernelPass:
    """Profiles the finished runs of a sweep; see the module docstring."""

    def __init__(self, sweep, trace_dir: Path | None):
        self.sweep, self.trace_dir = sweep, trace_dir
        self.forward: dict[tuple[int, int], list[str]] = {}
        self.draft: dict[tuple[int, int], list[str]] = {}  # the draft graph's kt.draft_signature
        self.projection: dict[tuple[int, int], list[str]] = {}  # the draft's own post-verify work, profiled alone
        self.bare: dict[tuple[int, int], float | None] = {}  # bare_kernel_draft_to_verify_us
        self.samples: dict[int, dict[str, list[float]]] = {}  # batch -> calibration samples

    def calibration(self) -> dict | None:
        """The ``costs.json`` document of every profiled run so far (None: no figure measured)."""
        s, c = self.sweep, self.sweep.config
        runs = sorted({(r["mode"], r["batch"]) for r in s.runs if r.get("calibrated")})
        clock = s.host_clock
        return cal.costs(
            self.samples,
            {
                "command": c.command,
                "model": c.model_path or c.model.name,
                "device": str(c.device),
                "profile_steps": c.profile_steps,
                "device_guard": c.device_guard,
                "side_streams": c.side_streams,
                "mapped_mirror": c.mapped_mirror,
                "draft_at_end": c.draft_at_end,
                "runs": [list(r) for r in runs],
                "machine": machine(c),
                "model_shape": model_shape(c),
            },
            clock.samples,
            clock.provenance(),
        )

    def run(self, inputs: dict) -> None:
        """``inputs[(width, batch)] = (prompts, oracle)``; fills in the rows of ``sweep.runs``."""
        s = self.sweep
        rows = [
            r
            for r in s.runs
            if "error" not in r and (r["width"], r["batch"]) in inputs and (s.config.cuda or r["mode"] == HOST_SERIAL)
        ]
        what = "kernel-level profile" if s.config.cuda else "host profile (calibration)"
        log(f"bench: {what} of {len(rows)} run(s), {s.config.profile_steps} steps each")
        if rows and s.config.cuda:  # the first profiled run of a process shows no graph kernels (StepProfiler)
            try:
                self._one(dict(rows[0]), *inputs[(rows[0]["width"], rows[0]["batch"])], keep=False)
            except (EngineError, RuntimeError):
                pass  # the real run of that row reports the failure
        for k, row in enumerate(rows):
            try:
                self._one(row, *inputs[(row["width"], row["batch"])])
            except (EngineError, RuntimeError) as e:
                row["kernel_profile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                log(
                    f"bench: profile of depth {row['depth']} batch {row['batch']} {row['mode']} failed: "
                    f"{row['kernel_profile_error']}"
                )
                if not s._device_ok():
                    return
                continue
            figures = ", ".join(f"{f} {row[f]}" for f in KERNEL_FIELDS + POST_VERIFY_FIELDS if row.get(f) is not None)
            log(
                f"bench: [{k + 1}/{len(rows)}] profiled depth {row['depth']} batch {row['batch']} {row['mode']}"
                + (f": {figures}" if figures else " (host calibration)" if not s.config.cuda else ": no kernel figures")
            )

    def _one(self, row: dict, prompts, oracle, keep: bool = True) -> None:
        s, c = self.sweep, self.sweep.config
        width, batch = row["width"], row["batch"]
        mix = AcceptanceMix(c.acceptance, oracle, c.model.vocab_size, seed=c.seed) if oracle is not None else None
        eng = s.kind.engine(
            s.model,
            s.head,
            mode=row["mode"],
            width=width,
            batch=batch,
            block_size=c.block_size,
            block_table_width=c.block_table_width,
            library=s.library,
            acceptance=mix,
            rank_check=s.rank_check,
            device_guard=c.device_guard,
            side_streams=c.side_streams,
            mapped_mirror=c.mapped_mirror,
            draft_at_end=c.draft_at_end,
            sampling=c.sampling_params(batch),
            draft_sampling=c.draft_sampling,
        )
        trails = eng.strategy.trails_draft  # its step graphs draft for the next step: the signature says so
        try:
            with quiet_profiler(), settled(c.cuda):
                res = eng.run(prompts, steps=c.profile_steps, warmup_steps=c.warmup, profile=True)
                if (width, batch) not in self.forward and c.cuda:
                    self._references(eng, (width, batch))
        finally:
            eng.close()
        if c.cuda:
            torch.cuda.synchronize(c.device)
        forward, draft = self.forward.get((width, batch), []), self.draft.get((width, batch), [])
        draft = [*draft, kt.TRAILS] if trails and draft else draft
        projection = self.projection.get((width, batch), [])
        if c.cuda:
            row.update(figures(res.trace, forward, draft, projection))
            row["bare_kernel_draft_to_verify_us"] = self.bare.get((width, batch))
        if keep:
            cal.merge(
                self.samples.setdefault(batch, {}), cal.samples(kt.load_trace(res.trace), forward, draft, row["mode"])
            )
            row["calibrated"] = True
        if self.trace_dir is not None:
            row["kernel_trace"] = trace_name(row)
            write_trace(self.trace_dir / row["kernel_trace"], res.trace, forward, row, draft, projection)

    def _references(self, eng, key: tuple[int, int]) -> None:
        """The forward's and the draft's kernel names and the bare kernel-level gap of ``key`` (width, batch)."""
        forward = self.forward[key] = kt.forward_lanes(kt.load_trace(forward_trace(eng)))
        work = eng.proposer.draft_work_after_verify()
        if work is not None:  # a kernel-name sequence, like the forward's
            self.projection[key] = kt.forward_names(kt.load_trace(work_trace(eng, work)))
        steps = kt.attribute(kt.load_trace(bare_trace(eng)))
        self.draft[key] = kt.phase_signature(steps, "draft")
        self.bare[key] = kt.summarize(kt.step_figures(steps, forward))["kernel_draft_to_verify_us"]
