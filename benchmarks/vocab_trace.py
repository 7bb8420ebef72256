"""Where one block of the vocabulary pass spends its time: a copy of a build folder whose vocabulary kernels stamp
the SM's cycle counter after every block-wide synchronisation, and a run that reads the stamps back.

Usage:
    python benchmarks/vocab_trace.py copy SRC DST        DST: SRC's cuda variants, the vocabulary kernels
                                                         recompiled from their sources with the stamps (nvcc)
    python benchmarks/vocab_trace.py run DST [B ...]     per B (default 1 8 32), spec_target_sample and
                                                         spec_draft_sample at temperature 0.7 with top-p 0.9 and at
                                                         the engine's C; OUT/vocab_trace.json and a Markdown table
                                                         (VOCAB_AB_TILES=1: spec_target_sample_tiles, given tiles)
    python benchmarks/vocab_trace.py plot OUT.png NAME=TRACE.json ...   block 0's phases of each trace's launches
                                                         (family and B as in the first), one bar per trace, the
                                                         phases over 1 us named by their time

The stamps: thread 0 of block 0 (row 0, chunk 0) writes ``clock64() << 8 | site`` after each ``__syncthreads()``
of the generated source (site = the sync's order in the source, 255 the kernel's entry) into the workspace's
unused column ``vocab_parts[..., 3]``, one slot per (row, chunk) in turn, as many as the workspace has (a longer
run of syncs loses its tail). No other block writes a stamp, and the kernel reads nothing of that column, so every
output is the build's own. A stamp costs block 0 a store per sync: the figures are the block's phases as they
run with it, for finding the long ones, not a timing of the pass (``vocab_ab.py time`` is that).

Each row of the table is one run of the syncs between two stamps; the source line of the sync names the phase
(the ``.cu`` beside the cubin in DST), and ``tags`` what that source names (``copy`` writes them beside).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ENTRY = 255
SYNC = "__syncthreads();"


def stamped(src: str, rows: str) -> tuple[str, list[int]]:
    """``src`` with a stamp after each sync and at the kernel's entry; the 1-based source line of each site."""
    lines = src.split("\n")
    start = next(n for n, ln in enumerate(lines) if "__launch_bounds__" in ln and ln.rstrip().endswith("{"))
    limit = f"(int64_t)({rows}) * (int64_t)C"
    put = (
        "if (threadIdx.x == 0 && blockIdx.x == 0) {{ if (sg_n < {limit}) "
        "{{ vocab_parts[sg_n * 4 + 3] = (((int64_t)clock64()) << 8) | {site}; }} sg_n++; }}"
    )
    sites, out = [], []
    for n, ln in enumerate(lines):
        if SYNC in ln:
            if len(sites) >= ENTRY:
                raise ValueError(f"more than {ENTRY} syncs in the source")
            ln = ln.replace(SYNC, SYNC + " " + put.format(limit=limit, site=len(sites)))
            sites.append(n + 1)
        out.append(ln)
        if n == start:
            out.append("  int64_t sg_n = 0; " + put.format(limit=limit, site=ENTRY))
    return "\n".join(out), sites


# what the source between two syncs does, by what it names (first the cross-block wait, whose loop names nbar)
TAGS = (
    ("wait for the row", ("< (nbar * ",)),
    ("shuffle fold", ("__shfl_xor_sync",)),
    ("scan", ("__shfl_up_sync",)),
    ("warp sums", ("__reduce_add_sync",)),
    ("exp", ("expf(",)),
    ("logits", ("logits[",)),
    ("p row", ("vocab_scratch[", "sample_probs[", "draft_dist[")),
    ("candidates", ("cand[min(",)),
    ("histogram adds", ("tomicAdd((&(hist_",)),
    ("tile sums", ("tomicAdd((&(tiles_",)),
    ("row sums out", ("AtomicAdd((&(vocab_sums",)),
    ("row sums in", ("AtomicLoad((&(vocab_sums",)),
    ("philox", ("seed[",)),
)


def tags(src: str, sites: list[int]) -> list[str]:
    """Per sync site, the ``TAGS`` its source names between the sync before it (in source order) and itself; the
    code there may hold other branches' too, so a tag says what the code names, not what ran."""
    lines, out = src.split("\n"), []
    for k, line in enumerate(sites):
        seg = "\n".join(lines[(sites[k - 1] if k else 0) : line - 1])
        hit = [t for t, keys in TAGS if any(key in seg for key in keys)]
        out.append(", ".join(hit))
    return out


def copy(src: Path, dst: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from lineinfo_copy import recompiled_copy

    sites = {}

    named = {}

    def stamp(family: str, text: str) -> str:
        out, sites[family] = stamped(text, "B" if family == "spec_draft_sample" else "B * W")
        named[family] = tags(text, sites[family])
        return out

    recompiled_copy(src, dst, [], stamp)
    (dst / "trace_sites.json").write_text(json.dumps(sites, indent=1))
    (dst / "trace_tags.json").write_text(json.dumps(named, indent=1))
    print(f"{dst}: {', '.join(f'{f} {len(s)} sites' for f, s in sites.items())}")


def decode(col: list[int], sites: list[int]) -> list[dict]:
    """The stamps in order (a zero slot ends them) as runs: from the stamp before to this one, in cycles."""
    n = col.index(0) if 0 in col else len(col)
    stamps = [(v >> 8, v & 255) for v in col[:n]]
    if not stamps or stamps[0][1] != ENTRY:
        return []
    t0, runs = stamps[0][0], []
    for (ta, _), (tb, site) in zip(stamps, stamps[1:]):
        line = sites[site] if site < len(sites) else None
        if runs and runs[-1]["site"] == site:  # the same sync again (a loop): one run
            runs[-1]["cycles"] += tb - ta
            runs[-1]["times"] += 1
        else:
            runs.append({"site": site, "line": line, "cycles": tb - ta, "times": 1})
        runs[-1]["at"] = tb - t0
    return runs


def run(folder: str, batches: list[int]) -> list[dict]:
    import torch

    from specgen.runtime.library import load_library
    from specgen.specializations.vocab_sample import vocab_chunks

    sys.path.insert(0, str(Path(__file__).parent))
    from vocab_ab import FAMS, V, W, launcher, rows_of

    torch.cuda.init()
    lib = load_library(folder)
    sites = json.loads((Path(folder) / "trace_sites.json").read_text())
    named = Path(folder) / "trace_tags.json"
    named = json.loads(named.read_text()) if named.exists() else {}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = []
    for batch in batches:
        for fam in FAMS:
            rows = batch if fam == "spec_draft_sample" else batch * W
            chunks = vocab_chunks(rows, V, sms)
            d = rows_of(fam, batch, 0.7, 0.9)
            fn = launcher(lib.get(fam, W, target="cuda"), fam, d, rows, chunks)
            ws = fn.workspace["vocab_parts"]
            for _ in range(3):  # the last launch's stamps (each launch writes every slot it reaches again)
                ws[..., 3].zero_()
                fn()
            torch.cuda.synchronize()
            col = ws[..., 3].flatten().tolist()
            runs = decode(col, sites[fam])
            does = named.get(fam, [])  # a copy made before the tags has none
            for x in runs:
                x["does"] = does[x["site"]] if x["site"] < len(does) else ""
            # every slot written: the block synced more often than the workspace has slots, the tail is lost
            res.append({"family": fam, "B": batch, "C": chunks, "runs": runs, "cut": 0 not in col})
            total = runs[-1]["at"] if runs else 0
            print(f"{fam} B={batch} C={chunks}: {len(runs)} runs, {total} cycles to the last stamp", flush=True)
    return res


def table(res: list[dict], clock_mhz: float) -> str:
    out = []
    for r in res:
        cut = " (the slots ran out: the block's later syncs are not here)" if r.get("cut") else ""
        out += ["", f"{r['family']}, B = {r['B']}, C = {r['C']} (cycles at {clock_mhz:.0f} MHz){cut}", ""]
        out += ["| run | .cu line | syncs | cycles | us | at us | the code there |", "|--:|--:|--:|--:|--:|--:|---|"]
        for n, x in enumerate(r["runs"]):
            us, at = x["cycles"] / clock_mhz, x["at"] / clock_mhz
            row = f"| {n} | {x['line']} | {x['times']} | {x['cycles']} | {us:.2f} | {at:.2f} | {x.get('does', '')} |"
            out.append(row)
    return "\n".join(out)


def _cut(launch: dict) -> bool:
    """Whether the launch's syncs outnumbered its slots (recorded since the ``cut`` flag; before, inferred from
    the stamp count: one slot per row and chunk, vocab_ab's W = 4 rows a sequence for the target families)."""
    if "cut" in launch:
        return bool(launch["cut"])
    rows = launch["B"] * (1 if launch["family"] == "spec_draft_sample" else 4)
    return 1 + sum(r["times"] for r in launch["runs"]) >= rows * launch["C"]


def plot(out: Path, traces: list[tuple[str, dict]]) -> None:
    """A picture of block 0's phases: per launch of the first trace (family, B), one horizontal bar per trace,
    each run of syncs a segment (alternating shades), the runs over 1 us labelled with their time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [(r["family"], r["B"]) for r in traces[0][1]["launches"]]
    fig, axes = plt.subplots(len(keys), 1, figsize=(11, 1.1 + 0.55 * len(traces) * len(keys)), squeeze=False)
    for ax, (fam, batch) in zip(axes[:, 0], keys):
        longest = 0.0
        for y, (name, data) in enumerate(traces):
            mhz = data.get("sm_mhz", 1980.0)
            hit = [r for r in data["launches"] if (r["family"], r["B"]) == (fam, batch)]
            if not hit:
                continue
            left = 0.0
            for n, run in enumerate(hit[0]["runs"]):
                us = run["cycles"] / mhz
                ax.barh(y, us, left=left, color=("#4c72b0", "#9bb5d9")[n % 2], edgecolor="white", linewidth=0.3)
                if us >= 1.0:
                    ax.text(left + us / 2, y, f"{us:.1f}", ha="center", va="center", fontsize=6, color="black")
                left += us
            cut = " (the slots ran out: later syncs unstamped)" if _cut(hit[0]) else ""
            ax.text(left, y, f"  {left:.1f} us{cut}", va="center", fontsize=7)
            longest = max(longest, left)
        chunks = hit[0]["C"] if hit else "?"
        ax.set_yticks(range(len(traces)), [name for name, _ in traces], fontsize=7)
        ax.set_xlim(0, longest * 1.12 or 1)
        ax.set_title(f"{fam}, B = {batch}, C = {chunks}: block 0 from entry to its last sync", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel("us at the SM clock (one segment: the work between two block-wide syncs)", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> None:
    if argv[:1] == ["plot"] and len(argv) >= 3 and all("=" in a for a in argv[2:]):
        named = [a.split("=", 1) for a in argv[2:]]
        plot(Path(argv[1]), [(n, json.loads(Path(f).read_text())) for n, f in named])
        print(f"wrote {argv[1]}")
        return
    if argv[:1] == ["copy"] and len(argv) == 3:
        copy(Path(argv[1]), Path(argv[2]))
        return
    if argv[:1] != ["run"] or len(argv) < 2:
        sys.exit(__doc__)
    res = run(argv[1], [int(b) for b in argv[2:]] or [1, 8, 32])
    mhz = float(os.environ.get("SM_MHZ", "1980"))  # the H200's top SM clock, where it runs a busy kernel
    out = Path(os.environ.get("OUT", "."))
    (out / "vocab_trace.json").write_text(json.dumps({"sm_mhz": mhz, "launches": res}, indent=1))
    text = table(res, mhz)
    (out / "vocab_trace.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
