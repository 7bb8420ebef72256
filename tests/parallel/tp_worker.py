"""One rank of the tensor-parallel tests, started by test_tp.py through ``launch`` (or by torchrun).

Reads a JSON job (``argv[1]``), runs every case in it on this rank (gloo on
the CPU, NCCL on a GPU per rank) and writes ``out_<rank>.json`` beside the
job: the TP model's greedy tokens, every engine run's tokens (with the rank
check after every step), host synchronizations per timed step on CUDA, the
vocabulary-parallel argmax checks and what the rank check said about a
deliberately corrupted rank. A case with ``sampling`` (one ``[temperature, top_k, top_p, seed]`` per
prompt) verifies by rejection sampling over the kernels of ``sampling_kernels``.
"""

import json
import sys
from pathlib import Path

import torch

from specgen.engine import AcceptanceMix, SpecDecodeEngine, greedy_generate
from specgen.engine.rank_check import RankCheck, RankMismatch
from specgen.models import MTPHead, Qwen3Model
from specgen.models.tp import shard_head, shard_model
from specgen.parallel.group import init_tensor_parallel
from specgen.runtime.library import load_library
from specgen.runtime.sampling import SamplingParams


def argmax_cases(model, tp) -> list[bool]:
    """``greedy_tokens`` over shards equals ``torch.argmax`` over the whole row, ties included."""
    v = model.config.vocab_size
    half = v // 2
    full = torch.zeros(6, v)
    full[0, [3, half + 3]] = 5.0  # tie across the shards: the lower index wins
    full[1, [half + 1, half + 7]] = 2.0  # tie inside the upper shard
    full[2, half + 9] = 1.0  # maximum in the upper shard only
    full[3] = -1.0  # every logit equal: index 0
    full[4, [half - 1, half]] = 9.0  # tie straddling the boundary
    full[5] = torch.randn(v, generator=torch.Generator().manual_seed(4))
    full = full.to(tp.device)
    got = model.greedy_tokens(full[:, model.vocab_lo : model.vocab_hi])
    return (got == full.argmax(-1)).tolist()


def whole_cases(model, tp) -> bool:
    """``whole_logits`` of this rank's range is the whole row, in vocabulary order, on every rank."""
    v = model.config.vocab_size
    full = torch.randn(5, v, generator=torch.Generator().manual_seed(6)).to(tp.device)
    mine = full[:, model.vocab_lo : model.vocab_hi].contiguous()
    into = torch.zeros(5, v, dtype=torch.float64, device=tp.device)
    gathered, cast = model.whole_logits(mine), model.whole_logits(mine, out=into)
    return torch.equal(gathered, full) and cast is into and torch.equal(into, full.double())


def engine(model, head, lib, case, tp, **kw) -> SpecDecodeEngine:
    return SpecDecodeEngine(
        model,
        head,
        mode=case["mode"],
        width=case["width"],
        batch=len(case["prompts"]),
        block_size=16,
        block_table_width=8,
        library=lib,
        compile_backend=case.get("compile_backend", "eager"),
        sampling=[SamplingParams(*p) for p in case["sampling"]] if case.get("sampling") else None,
        **kw,
    )


def corrupted_run(model, head, lib, case, tp) -> str:
    """Rank 1 bumps ``next_seq_lens`` after the verification of step 2; the check must name it."""
    eng = engine(model, head, lib, case, tp, rank_check=RankCheck(tp, 1))
    verify, step = eng.strategy.verify, [0]

    def corrupt(*args, **kw):
        out = verify(*args, **kw)
        if tp.rank == 1 and step[0] == 2:
            eng.bufs["next_seq_lens"][0] += 1
        step[0] += 1
        return out

    eng.strategy.verify = corrupt
    try:
        eng.run(case["prompts"], max_new_tokens=case["new"])
    except RankMismatch as e:
        return str(e)
    finally:
        eng.close()
    return "no mismatch reported"


def run_case(model, head, lib, case, tp, check, oracle) -> dict:
    """Tokens with the rank check after every step; on CUDA also host syncs of three timed steps."""
    mix = None
    if case.get("acceptance") is not None:
        mix = AcceptanceMix(case["acceptance"], oracle, model.config.vocab_size, seed=3)
    eng = engine(model, head, lib, case, tp, acceptance=mix, rank_check=check)
    try:
        res = eng.run(case["prompts"], max_new_tokens=case["new"])
        out = {"outputs": res.outputs, "stats": res.runtime_stats}
        if tp.device.type == "cuda":
            timed = eng.run(case["prompts"], steps=3, warmup_steps=1, timing=True)
            out["syncs"] = [t.host_syncs for t in timed.timings]
        return out
    finally:
        eng.close()  # captured graphs must be gone before the group is torn down


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    tp = init_tensor_parallel(2, job.get("device", "cpu"))
    libs = {"engine": load_library(job["kernels"])}
    if job.get("sampling_kernels"):
        libs["sampling"] = load_library(job["sampling_kernels"])
    model = shard_model(Qwen3Model.create("tiny", seed=0, device=tp.device), tp)
    heads = {1: MTPHead.create(model, seed=1), 2: shard_head(MTPHead.create(model, seed=1), tp)}
    check = RankCheck(tp, 1)
    out = {"argmax": argmax_cases(model, tp), "whole": whole_cases(model, tp), "greedy": {}, "runs": []}
    with torch.inference_mode():
        for key, prompts in job["prompts"].items():
            out["greedy"][key] = greedy_generate(model, prompts, job["new"])
    for case in job["cases"]:
        oracle = torch.tensor(out["greedy"][case["prompts"]], device=tp.device)
        run = dict(case, prompts=job["prompts"][case["prompts"]])
        lib = libs["sampling" if case.get("sampling") else "engine"]
        out["runs"].append({**case, **run_case(model, heads[case["draft_tp"]], lib, run, tp, check, oracle)})
    bad = dict(job["corrupt"], prompts=job["prompts"][job["corrupt"]["prompts"]])
    out["corrupted"] = corrupted_run(model, heads[1], libs["engine"], bad, tp)
    out["checks"] = check.checks
    Path(sys.argv[1]).with_name(f"out_{tp.rank}.json").write_text(json.dumps(out))
    tp.close()


if __name__ == "__main__":
    main()
