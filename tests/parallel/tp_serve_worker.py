"""One rank of the tensor-parallel serving test, started by test_tp_serving.py through ``launch``.

Reads a JSON job (``argv[1]``): the kernel folder, the modes and the requests (prompt, budget, stop ids, all
arriving at once, so every rank schedules the same steps; a request with ``sampling``, ``[temperature, top_k,
top_p, seed]``, samples).  Serves them with the tiny target split over the
ranks (gloo on the CPU) and writes ``serve_<rank>.json`` beside the job: each mode's per-request outputs and
its run's preemptions and decode steps.
"""

import json
import sys
from pathlib import Path

from specgen.engine import AcceptanceMix, greedy_generate
from specgen.engine.serving import Request
from specgen.engine.serving.loop import ServingLoop
from specgen.models import MTPHead, Qwen3Model
from specgen.models.tp import shard_head, shard_model
from specgen.parallel.group import init_tensor_parallel
from specgen.runtime.library import load_library
from specgen.runtime.sampling import SamplingParams


def _params(request: dict) -> SamplingParams | None:
    return SamplingParams(*request["sampling"]) if request.get("sampling") else None


def main(path: str) -> None:
    job = json.loads(Path(path).read_text())
    tp = init_tensor_parallel(2, "cpu")
    whole = Qwen3Model.create("tiny", seed=0)
    head = MTPHead.create(whole, seed=1)
    model = shard_model(whole, tp)
    if job.get("draft_tp", 1) == 2:
        head = shard_head(head, tp)
    lib = load_library(job["kernels"])
    reqs = job["requests"]
    longest = max(r["budget"] for r in reqs) + 2 * 4 + 1
    oracle = greedy_generate(model, [r["prompt"] for r in reqs], longest)
    import torch

    sampled = any(r.get("sampling") for r in reqs)  # the drafts' own samples then, no acceptance mix
    mix = None if sampled else AcceptanceMix(0.7, torch.tensor(oracle), vocab_size=whole.config.vocab_size, seed=3)
    out = {"oracle": oracle, "runs": {}}
    for mode in job["modes"]:
        loop = ServingLoop(
            model,
            head,
            mode=mode,
            depth=3,
            max_batch=4,
            num_blocks=job.get("num_blocks", 7),
            block_size=16,
            block_table_width=8,
            max_prefill_tokens=16,
            kernels=lib if mode in ("specgen", "inductor") else None,
            acceptance=mix,
            read_lag=1,
            compile_backend="eager",
            sampling=sampled,
        )
        load = [
            Request(i, tuple(r["prompt"]), r["budget"], frozenset(r["stops"]), sampling=_params(r))
            for i, r in enumerate(reqs)
        ]
        run = loop.run(load)
        out["runs"][mode] = {
            "outputs": {str(r.id): list(loop.requests[r.id].output) for r in load},
            "preemptions": run.preemptions,
            "steps": len(run.steps),
            "fast_path": sum(s.fast_path for s in run.steps),
        }
    Path(path).with_name(f"serve_{tp.rank}.json").write_text(json.dumps(out))
    tp.close()


if __name__ == "__main__":
    main(sys.argv[1])
