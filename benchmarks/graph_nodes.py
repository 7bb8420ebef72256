"""The captured graphs of a specgen engine, node by node: how many kernels, memsets, copies, event records and waits
each holds, whether it is one chain, where it forks.  ``benchmarks/graph_shapes.py`` shows that a graph of kernels
on one stream launches faster than any graph with a fork, an event wait, or a copy or memset among its kernels; this
says which of those a real step's graphs hold.

    python benchmarks/graph_nodes.py --model qwen3-0.6b --draft mtp --depth 3 --batch 1 --kernels build/bench_w4 \\
        --block-size 128 --block-table-width 64 [--no-side-streams] --out nodes.json [--dots DIR]

Every graph the engine captures (through ``runtime.device.DeviceAPI``) is dumped with ``CUDAGraph.debug_dump`` as its
capture ends, during a short run (random weights, specgen mode); ``bench/graph_dot.py`` reads the dumps.
Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

from specgen.bench.graph_dot import read_dot, summary

__all__ = ["main"]


def _recording_graphs(torch, dumps: list, folder: Path):
    """A ``CUDAGraph`` class whose instances keep their graph, in debug mode, and dump it into ``folder`` as each
    capture ends (an engine resets its graphs when its run ends); the dumps' paths go to ``dumps``."""

    class Recorded(torch.cuda.CUDAGraph):
        # The bound graph object is built by ``__init__`` (a ``keep_graph`` or debug flag set in ``__new__`` alone is
        # lost when the engine's ``CUDAGraph()`` runs ``__init__`` with its own default), so both ask to keep it.
        def __new__(cls, keep_graph: bool = False):
            return super().__new__(cls, True)

        def __init__(self, keep_graph: bool = False):
            super().__init__(True)
            self.enable_debug_mode()

        def capture_end(self) -> None:
            super().capture_end()
            self.instantiate()  # a kept graph dumps nothing before it is instantiated
            path = folder / f"graph_{len(dumps)}.dot"
            self.debug_dump(str(path))
            dumps.append(path)

    return Recorded


def _run(torch, a, dumps: list) -> list[dict]:
    """The engine's short run, then every graph it captured, summarized from its dump."""
    from specgen.engine.draft_kinds import DRAFT_KINDS
    from specgen.models import Qwen3Model
    from specgen.runtime.library import load_library

    model = Qwen3Model.create(a.model, seed=0, dtype=torch.bfloat16, device="cuda")
    kind = DRAFT_KINDS[a.draft]
    eng = kind.engine(
        model,
        kind.create(model, seed=1),
        mode="specgen",
        width=a.depth + 1,
        batch=a.batch,
        block_size=a.block_size,
        block_table_width=a.block_table_width,
        library=load_library(a.kernels),
        side_streams=not a.no_side_streams,
    )
    rng = random.Random(0)
    prompts = [[rng.randrange(model.config.vocab_size) for _ in range(16)] for _ in range(a.batch)]
    eng.run(prompts, steps=a.steps, warmup_steps=1)
    torch.cuda.synchronize()
    rows = []
    for i, path in enumerate(dumps):
        rows.append({"graph": i} | (summary(read_dot(path.read_text())) if path.exists() else {"nodes": None}))
    eng.close()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen3-0.6b", help="a Qwen3 preset (random weights)")
    p.add_argument("--draft", default="mtp", help="mtp, dflash or dspark")
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--kernels", required=True, help="a built kernel folder with the step's variants (cuda)")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--block-table-width", type=int, default=64)
    p.add_argument("--no-side-streams", action="store_true", help="the runtime's one-stream capture")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", required=True, help="the JSON to write")
    p.add_argument("--dots", default=None, help="a folder for the DOT dumps themselves")
    a = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    from specgen.engine.draft_kinds import DRAFT_KINDS

    if a.draft not in DRAFT_KINDS:
        p.error(f"--draft: one of {', '.join(DRAFT_KINDS)}")
    dumps: list = []
    plain = torch.cuda.CUDAGraph
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(a.dots or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        torch.cuda.CUDAGraph = _recording_graphs(torch, dumps, folder)  # before any DeviceAPI reads it
        try:
            rows = _run(torch, a, dumps)
        finally:
            torch.cuda.CUDAGraph = plain
    out = {"command": " ".join(sys.argv), "device": torch.cuda.get_device_name(), "graphs": rows}
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for r in rows:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
