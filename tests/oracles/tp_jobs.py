"""The two-rank tensor-parallel jobs of ``tests/parallel``: prompt sets, cases and one launch of
``tp_worker.py`` over two ranks (gloo on the CPU, NCCL on two GPUs)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from specgen.parallel.launch import launch

NEW = 12
HORIZON = NEW + 3 * 6 + 1  # the acceptance oracle's length, enough for width 6
WORKER = Path(__file__).parents[1] / "parallel" / "tp_worker.py"
TIMEOUT_S = 240


def prompts_for(batch: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    lens = [1] + [rng.randint(2, 12) for _ in range(batch - 1)]
    rng.shuffle(lens)
    return [[rng.randrange(512) for _ in range(n)] for n in lens]


def case(mode: str, width: int, batch: int, draft_tp: int = 1, **kw) -> dict:
    """Batch 1 decodes with the MTP head's own drafts, larger batches with drafts accepted at p = 0.7."""
    return {
        "mode": mode,
        "width": width,
        "prompts": f"b{batch}w{width}",
        "new": NEW,
        "draft_tp": draft_tp,
        "acceptance": 0.7 if batch > 1 else None,
        **kw,
    }


def run_ranks(
    folder: Path, kernels, cases: list[dict], batches, device: str = "cpu", timeout: float = TIMEOUT_S, sampling=None
) -> tuple[dict, list[dict]]:
    """Launch the two ranks of ``tp_worker.py`` over ``cases`` (``sampling``: the library of the sampled cases);
    the job and each rank's results."""
    prompts = {f"b{b}w{w}": prompts_for(b, seed=w * 10 + b) for w in range(2, 7) for b in batches}
    job = {
        "kernels": str(kernels.root),
        "prompts": prompts,
        "new": HORIZON,
        "cases": cases,
        "device": device,
        "corrupt": {"mode": "specgen", "width": 4, "prompts": "b3w4", "new": NEW},
    }
    if sampling is not None:
        job["sampling_kernels"] = str(sampling.root)
    (folder / "job.json").write_text(json.dumps(job))
    rc = launch([sys.executable, str(WORKER), str(folder / "job.json")], 2, timeout=timeout)
    assert rc == 0, f"a rank failed or hung (exit {rc})"
    return job, [json.loads((folder / f"out_{r}.json").read_text()) for r in range(2)]


def check_ranks_caught(outs: list[dict], runs: int) -> None:
    """Every step of every run was compared (and agreed); the corrupted rank was named by its field."""
    for out in outs:
        assert out["checks"] > runs * 2
        msg = out["corrupted"]
        assert "field 'next_seq_lens' differs" in msg and "after step 2 of specgen mode" in msg, msg
