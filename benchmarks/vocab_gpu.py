"""Device check of the vocabulary pass's kernels: every output bit for bit against runtime/sampling.py on CUDA,
and their timings against the torch ops of the same semantics.

Usage: python benchmarks/vocab_gpu.py all|check   (VOCAB_LIB: the build folder, default build/sampling_test_kernels;
OUT: where vocab_gpu.json goes)

``check``: a few vocabularies (17, 1025), B = 1 and 3, C = 1, 3 and the engine's, every family the folder has (the
ones that read logit tiles with their odd rows given them); ``all``: V from 1 to 151936,
B = 1, 3 and 32 (216 checks), then the timings at V = 151936 (temperature 0.7 with top-p 0.9, temperature 1.0,
top-k 50, greedy; each row at C = 1, one block per row, and at the C the engine picks). Each launch runs twice on
one workspace: the second finds it as the first left it (zero).
"""

import json
import os
import sys

import torch

from specgen.runtime import sampling as S
from specgen.runtime.library import load_library
from specgen.runtime.vocab_pass import logit_tiles_of
from specgen.specializations import FAMILIES
from specgen.specializations.vocab_sample import VOCAB_SUMS, vocab_chunks

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vocab_ab import median_us  # noqa: E402  (benchmarks/ is not a package)

OUT = os.environ.get("OUT", "/tmp")
torch.cuda.init()
torch.zeros(1, device="cuda")
LIB = load_library(os.environ.get("VOCAB_LIB", "build/sampling_test_kernels"))
SMS = torch.cuda.get_device_properties(0).multi_processor_count
TILED = ("spec_target_sample_tiles", "spec_target_sample_dense_tiles")  # checked where the folder has them
KERN = {
    f: LIB.get(f, 4, target="cuda")
    for f in ("spec_target_sample", "spec_target_sample_dense", "spec_draft_sample", *TILED)
    if f not in TILED or LIB.has(f, 4)
}


def call(fam, t, B, V, rows):
    KERN[fam](*(t[a.name] for a in FAMILIES[fam].args))


def inputs(B, W, V, gen, p_all=None):
    dev = "cuda"
    t = torch.rand(B, generator=gen) * 1.5
    t[torch.rand(B, generator=gen) < 0.25] = 0.0
    k = torch.randint(0, V + 2, (B,), generator=gen).int()
    k[torch.rand(B, generator=gen) < 0.4] = 0
    p = torch.rand(B, generator=gen)
    p[torch.rand(B, generator=gen) < 0.3] = 1.0
    if p_all is not None:
        t, k, p = torch.full((B,), p_all[0]), torch.full((B,), p_all[1], dtype=torch.int32), torch.full((B,), p_all[2])
    seed = torch.randint(-(2**62), 2**62, (B,), generator=gen)
    scale = torch.rand(1, generator=gen).item() * 8 if p_all is None else 4.0  # timings: one fixed scale
    logits = torch.randn(B * W, V, generator=gen) * scale
    if V > 4:
        logits[:, 1] = logits[:, 0]
    d = dict(temperature=t.float(), top_k=k, top_p=p.float(), seed=seed, logits=logits)
    return {n: v.to(dev) for n, v in d.items()}


def workspace(rows, V, chunks):
    C = vocab_chunks(rows, V, SMS) if chunks is None else chunks
    return dict(
        vocab_parts=torch.zeros(rows, C, 4, dtype=torch.int64, device="cuda"),
        vocab_sums=torch.zeros(rows, VOCAB_SUMS, dtype=torch.int64, device="cuda"),
    )


def target(B, W, V, gen, dense, p_all=None, check=True, chunks=None, tiles=False):
    """``tiles``: the family that reads logit tiles, its odd rows given their logits' tiles, the even ones unset."""
    d = inputs(B, W, V, gen, p_all)
    if tiles:
        d["logit_tiles"] = logit_tiles_of(d["logits"])
        d["logit_tiles"][::2, 0] = -1
    d["seq_lens"] = torch.randint(0, 5000, (B,), generator=gen).int().cuda()
    d["draft_tokens"] = torch.randint(-2, V + 2, (B, W - 1), generator=gen).int().cuda()
    d["draft_probs"] = torch.rand(B, W - 1, generator=gen).cuda()
    dists = None
    if dense:
        dists = torch.softmax(torch.randn(W - 1, B, V, generator=gen).cuda() * 3, -1).contiguous()
        d["draft_dists"] = dists
    out = dict(
        target_tokens=torch.full((B, W), -7, dtype=torch.int32),
        target_draft_probs=torch.full((B, W - 1), -7.0),
        accept_uniforms=torch.full((B, W - 1), -7.0),
        vocab_scratch=torch.full((B * W, V), -7.0),
    )
    out = {n: v.cuda() for n, v in out.items()}
    out.update(workspace(B * W, V, chunks))
    fam = ("spec_target_sample_dense" if dense else "spec_target_sample") + ("_tiles" if tiles else "")
    t = {**d, **out}
    run_k = lambda: call(fam, t, B, V, B * W)
    bufs = dict(temperature=d["temperature"], top_k=d["top_k"], top_p=d["top_p"], target_tokens=out["target_tokens"])
    dd = None if dists is None else dists.transpose(0, 1)

    def run_t():  # the semantics: p's rows (f) and the rejection inputs
        f = S.row_weights(d["logits"], *S.row_params(bufs, W)).view(B, W)
        return f, S.rejection_inputs(d["draft_tokens"], d["draft_probs"], dd, f, d["seed"], d["seq_lens"])

    run_k()
    run_k()
    torch.cuda.synchronize()  # twice: the second launch finds the workspace as the first left it
    bad = []
    if check:
        f, want = run_t()
        for name, w in zip(("target_tokens", "target_draft_probs", "accept_uniforms"), want):
            if not torch.equal(out[name], w):
                bad.append(name)
        if out["vocab_sums"].any():
            bad.append("vocab_sums")
    return bad, run_k, run_t, (fam, t, B * W)


def draft(B, V, gen, p_all=None, check=True, chunks=None):
    d = inputs(B, 1, V, gen, p_all)
    d["draft_logits"] = d.pop("logits")
    d["sample_positions"] = torch.randint(-10, 10**6, (B,), generator=gen).cuda()
    out = {
        n: v.cuda()
        for n, v in dict(
            sampled_tokens=torch.full((B,), -7),
            sampled_probs=torch.full((B,), -7.0),
            draft_dist=torch.full((B, V), -7.0),
        ).items()
    }
    out.update(workspace(B, V, chunks))
    t = {**d, **out}
    run_k = lambda: call("spec_draft_sample", t, B, V, B)
    run_t = lambda: S.draft_sample(d["draft_logits"], d, d["sample_positions"])
    run_k()
    run_k()
    torch.cuda.synchronize()  # twice: the second launch finds the workspace as the first left it
    bad = []
    if check:
        x, qx, q = run_t()
        for name, w in (("sampled_tokens", x), ("sampled_probs", qx), ("draft_dist", q)):
            if not torch.equal(out[name], w):
                bad.append(name)
        if out["vocab_sums"].any():
            bad.append("vocab_sums")
    return bad, run_k, run_t, ("spec_draft_sample", t, B)


timeit = median_us  # benchmarks/vocab_ab.py's event timing


mode = sys.argv[1] if len(sys.argv) > 1 else "all"
res = {"checks": [], "timings": []}
gen = torch.Generator().manual_seed(7)
if mode in ("all", "check"):
    nbad = 0
    for V in (1, 3, 17, 1000, 1024, 1025, 5000, 151936) if mode == "all" else (17, 1025):
        for B in (1, 3, 32):
            if V == 151936 and B == 32 and mode != "all":
                continue
            for kind in ("target", "dense", "draft", *(("tiles", "dense_tiles") if TILED[0] in KERN else ())):
                for chunks in (1, 3, None):
                    if chunks == 3 and 3 * (B if kind == "draft" else 4 * B) > SMS:
                        continue  # more blocks than the device holds at once: the launcher refuses the grid
                    bad = (
                        draft(B, V, gen, chunks=chunks)
                        if kind == "draft"
                        else target(B, 4, V, gen, kind.startswith("dense"), chunks=chunks, tiles=kind.endswith("tiles"))
                    )[0]
                    res["checks"].append(dict(V=V, B=B, kind=kind, chunks=chunks, bad=bad))
                    nbad += bool(bad)
                    if bad:
                        print("BAD", V, B, kind, chunks, bad, flush=True)
    print("checks", len(res["checks"]), "bad", nbad, flush=True)
if mode == "all":
    V = 151936
    for B in (1, 8, 32):
        for name, p_all in (
            ("t0.7_p0.9", (0.7, 0, 0.9)),
            ("t1.0", (1.0, 0, 1.0)),
            ("t0.7_k50", (0.7, 50, 1.0)),
            ("greedy", (0.0, 0, 1.0)),
        ):
            for kind in ("target", "dense", "draft"):
                row = dict(B=B, setting=name, kind=kind)
                bad, rk, rt, (fam, t, rows) = (
                    draft(B, V, gen, p_all, chunks=1)
                    if kind == "draft"
                    else target(B, 4, V, gen, kind == "dense", p_all, chunks=1)
                )
                row["bad"] = bad
                row["kernel_us_c1"] = timeit(rk, graph=True)  # one block per row (device time: a graph replayed)
                t2 = {**t, **workspace(rows, V, None)}  # the same rows, the engine's C
                row["kernel_us_auto"] = timeit(lambda: call(fam, t2, B, V, rows), graph=True)
                row["chunks_auto"] = vocab_chunks(B if kind == "draft" else B * 4, V, SMS)
                row["torch_us"] = timeit(rt, 3, 2)
                res["timings"].append(row)
                print(row, flush=True)
os.makedirs(OUT, exist_ok=True)
json.dump(res, open(f"{OUT}/vocab_gpu.json", "w"), indent=1)
