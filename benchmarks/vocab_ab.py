"""Kernel-level A/B of the vocabulary pass: the same rows through the kernels of one or more build folders.

Usage:
    python benchmarks/vocab_ab.py time DIR [DIR ...]   each folder's spec_target_sample and spec_draft_sample,
                                                       temperature 0.7 with top-p 0.9, greedy, and temperature 1.0,
                                                       B = 1, 8, 32, at C = 1 and at the engine's C; the median of
                                                       7 repeats of 10 launches; OUT/time_<folder>.json per folder
    python benchmarks/vocab_ab.py sweep DIR            spec_target_sample and spec_draft_sample at temperature 0.7 with
                                                       top-p 0.9, B = 1, 8, 32, every C from 1 to the engine's (powers
                                                       of two and the engine's); OUT/sweep_<folder>.json
    python benchmarks/vocab_ab.py report OUT           a Markdown table of OUT's time_*.json side by side (the first
                                                       folder the base) and, per family and B, the sweep's fastest C
    python benchmarks/vocab_ab.py ncu DIR [B [FAMILY]] three launches of spec_target_sample (or FAMILY) at B = 32,
                                                       C = 1, temperature 0.7, top-p 0.9 (another B, or the draft
                                                       family: at the engine's C): the launch to profile, e.g.
    ncu --set full --import-source yes -k regex:spec_target_sample --launch-skip 2 --launch-count 1 -o R \\
        python benchmarks/vocab_ab.py ncu DIR

Logits are N(0, 1) * 4 over V = 151936 (Qwen3's vocabulary), W = 4 (VOCAB_AB_SPREAD=S: N(0, 1) * S, e.g. 0.5
for the flat rows of a model with random weights); every folder sees the same rows. The 10
launches of a timing are one CUDA graph, replayed: the device's time, not the host's (a launch from Python
takes longer than a short kernel runs). Compare folders inside one run (folders in turn). The target family's
family is ``spec_target_sample``; VOCAB_AB_TILES=1 times ``spec_target_sample_tiles`` instead, every row given the
producer's tiles (``logit_tiles_of``), into ``time_<folder>_tiles.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import torch

from specgen.runtime.library import load_library
from specgen.runtime.vocab_pass import logit_tiles_of
from specgen.specializations import FAMILIES
from specgen.specializations.vocab_sample import VOCAB_SUMS, vocab_chunks

V, W = 151936, 4
SETTINGS = {"t0.7_p0.9": (0.7, 0.9), "greedy": (0.0, 1.0), "t1.0": (1.0, 1.0)}
TILES = os.environ.get("VOCAB_AB_TILES", "0") == "1"  # the target family that reads the logits' tiles, given them
FAMS = ("spec_target_sample_tiles" if TILES else "spec_target_sample", "spec_draft_sample")


def rows_of(fam: str, batch: int, temp: float, top_p: float) -> dict:
    """The family's arguments for ``batch`` sequences (the workspace is added per C)."""
    g = torch.Generator().manual_seed(batch)
    rows = batch if fam == "spec_draft_sample" else batch * W
    d = {
        "temperature": torch.full((batch,), temp),
        "top_k": torch.zeros(batch, dtype=torch.int32),
        "top_p": torch.full((batch,), top_p),
        "seed": torch.randint(0, 2**62, (batch,), generator=g),
        "seq_lens": torch.randint(0, 5000, (batch,), generator=g).int(),
        "draft_tokens": torch.randint(0, V, (batch, W - 1), generator=g).int(),
        "draft_probs": torch.rand(batch, W - 1, generator=g),
        "sample_positions": torch.randint(0, 10**6, (batch,), generator=g),
        "target_tokens": torch.zeros(batch, W, dtype=torch.int32),
        "target_draft_probs": torch.zeros(batch, W - 1),
        "accept_uniforms": torch.zeros(batch, W - 1),
        "sampled_tokens": torch.zeros(batch, dtype=torch.int64),
        "sampled_probs": torch.zeros(batch),
    }
    d["logits"] = d["draft_logits"] = torch.randn(rows, V, generator=g) * SPREAD
    if TILES:
        d["logit_tiles"] = logit_tiles_of(d["logits"])
    d["vocab_scratch"] = d["draft_dist"] = torch.zeros(rows, V)
    return {k: v.cuda() for k, v in d.items()}


def launcher(kernel, fam: str, d: dict, rows: int, chunks: int):
    d = {**d, "vocab_parts": torch.zeros(rows, chunks, 4, dtype=torch.int64, device="cuda")}
    d["vocab_sums"] = torch.zeros(rows, VOCAB_SUMS, dtype=torch.int64, device="cuda")
    names = [a.name for a in FAMILIES[fam].args]

    def launch():
        kernel(*(d[n] for n in names))

    launch.workspace = d  # the arguments, the workspace among them (benchmarks/vocab_trace.py reads it)
    return launch


SPREAD = float(os.environ.get("VOCAB_AB_SPREAD", "4"))  # the logits' standard deviation
LAST_CLOCK = "launches"  # how median_us timed its last call: "graph" (replayed) or "launches" (one by one)


def median_us(fn, reps: int = 7, inner: int = 10, graph: bool = False) -> float:
    """The median over ``reps`` of the mean time (us) of ``inner`` launches of ``fn``, by CUDA events.

    ``graph``: the ``inner`` launches captured in one CUDA graph and the graph replayed, so the figure is the
    device's (a launch from Python costs tens of microseconds of host time, more than a short kernel runs,
    and launched one by one the events would time the host); else launched one by one."""
    global LAST_CLOCK
    fn()
    torch.cuda.synchronize()
    run, LAST_CLOCK = fn, "launches"
    if graph:
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for _ in range(inner):
                    fn()
            g.replay()
            torch.cuda.synchronize()
            run, LAST_CLOCK = g.replay, "graph"
        except RuntimeError as e:  # timed launch by launch instead, and the row says so
            print(f"median_us: capture failed ({e}); timing launch by launch", file=sys.stderr, flush=True)
            graph = False
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        if graph:
            run()
        else:
            for _ in range(inner):
                run()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000 / inner)
    return statistics.median(ts)


def time_folder(folder: str) -> list[dict]:
    lib = load_library(folder)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = []
    for setting, (temp, top_p) in SETTINGS.items():
        for fam in FAMS:
            kernel = lib.get(fam, W, target="cuda")
            for batch in (1, 8, 32):
                rows = batch if fam == "spec_draft_sample" else batch * W
                d = rows_of(fam, batch, temp, top_p)
                for chunks in (1, vocab_chunks(rows, V, sms)):
                    us = round(median_us(launcher(kernel, fam, d, rows, chunks), graph=True), 1)
                    res.append(
                        {
                            "family": fam.removesuffix("_tiles"),  # a row of the report beside the plain family's
                            "tiles": TILES,
                            "setting": setting,
                            "B": batch,
                            "C": chunks,
                            "us": us,
                            "clock": LAST_CLOCK,
                            "spread": SPREAD,
                        }
                    )
                    print(res[-1], flush=True)
    return res


def sweep_chunks(most: int) -> list[int]:
    """The C a sweep times: the powers of two below ``most``, and ``most``."""
    return sorted({c for c in (2**n for n in range(most.bit_length())) if c < most} | {most})


def sweep_folder(folder: str) -> list[dict]:
    lib = load_library(folder)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    temp, top_p = SETTINGS["t0.7_p0.9"]
    res = []
    for fam in FAMS:
        kernel = lib.get(fam, W, target="cuda")
        for batch in (1, 8, 32):
            rows = batch if fam == "spec_draft_sample" else batch * W
            d = rows_of(fam, batch, temp, top_p)
            engine = vocab_chunks(rows, V, sms)
            for chunks in sweep_chunks(engine):
                us = round(median_us(launcher(kernel, fam, d, rows, chunks), graph=True), 1)
                res.append(
                    {"family": fam, "setting": "t0.7_p0.9", "B": batch, "C": chunks, "engine_C": engine, "us": us}
                    | {"clock": LAST_CLOCK}
                )
                print(res[-1], flush=True)
    return res


def report(out: Path) -> str:
    """The A/B table of ``out``'s ``time_*.json`` (in the order their folders were timed: the file times) and the
    sweeps' fastest C against the engine's."""
    lines = []
    times = sorted(out.glob("time_*.json"), key=lambda p: p.stat().st_mtime)
    if times:
        names = [p.stem[len("time_") :] for p in times]
        cells = [
            {(r["family"], r["setting"], r["B"], r["C"]): r["us"] for r in json.loads(p.read_text())} for p in times
        ]
        lines += ["| family | setting | B | C | " + " | ".join(f"{n} us" for n in names) + " | last / first |"]
        lines += ["|---|---|--:|--:|" + "--:|" * (len(names) + 1)]
        for key in cells[0]:
            us = [c.get(key) for c in cells]
            ratio = f"{us[-1] / us[0]:.3f}" if us[0] and us[-1] is not None else "-"
            lines.append("| " + " | ".join(map(str, key)) + " | " + " | ".join(map(str, us)) + f" | {ratio} |")
    for p in sorted(out.glob("sweep_*.json")):
        rows = json.loads(p.read_text())
        lines += ["", f"{p.stem}: the fastest C per family and B (us), against the engine's C", ""]
        lines += ["| family | B | engine C | us | fastest C | us |", "|---|--:|--:|--:|--:|--:|"]
        for fam, batch in dict.fromkeys((r["family"], r["B"]) for r in rows):
            mine = [r for r in rows if (r["family"], r["B"]) == (fam, batch)]
            best = min(mine, key=lambda r: r["us"])
            eng = next(r for r in mine if r["C"] == r["engine_C"])
            lines.append(f"| {fam} | {batch} | {eng['C']} | {eng['us']} | {best['C']} | {best['us']} |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if argv[:1] == ["report"] and len(argv) == 2:
        print(report(Path(argv[1])))
        return
    ncu_ok = argv[:1] == ["ncu"] and len(argv) in (2, 3, 4) and (len(argv) < 4 or argv[3] in FAMS)
    if len(argv) < 2 or argv[0] not in ("time", "sweep", "ncu") or (argv[0] == "ncu" and not ncu_ok):
        sys.exit(__doc__)
    torch.cuda.init()
    if argv[0] == "ncu":
        batch = int(argv[2]) if len(argv) >= 3 else 32
        fam = argv[3] if len(argv) == 4 else FAMS[0]
        rows = batch if fam == "spec_draft_sample" else batch * W
        engine = vocab_chunks(rows, V, torch.cuda.get_device_properties(0).multi_processor_count)
        chunks = 1 if (batch == 32 and fam == FAMS[0]) else engine
        kernel = load_library(argv[1]).get(fam, W, target="cuda")
        fn = launcher(kernel, fam, rows_of(fam, batch, 0.7, 0.9), rows, chunks)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        return
    out = Path(os.environ.get("OUT", "."))
    for folder in argv[1:]:
        if argv[0] == "sweep":
            (out / f"sweep_{Path(folder).name}.json").write_text(json.dumps(sweep_folder(folder), indent=1))
        else:
            name = Path(folder).name + ("_tiles" if TILES else "")
            (out / f"time_{name}.json").write_text(json.dumps(time_folder(folder), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
