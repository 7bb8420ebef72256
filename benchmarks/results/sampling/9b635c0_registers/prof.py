"""Launch spec_target_sample at B = 32 (t 0.7, top-p 0.9, C = 1) a few times, for ncu; then time C = 1 and the engine's C."""
import os, sys, statistics, json
import torch
from specgen.runtime.library import load_library
from specgen.specializations import FAMILIES
from specgen.specializations.vocab_sample import VOCAB_SUMS, vocab_chunks
lib = load_library(sys.argv[1])
timing = len(sys.argv) > 2 and sys.argv[2] == "time"
SMS = torch.cuda.get_device_properties(0).multi_processor_count
V, W = 151936, 4
res = []
SETTINGS = {"t0.7_p0.9": (0.7, 0.9), "greedy": (0.0, 1.0), "t1.0": (1.0, 1.0)}
for fam, setting in [(f, st) for st in (SETTINGS if timing else ["t0.7_p0.9"]) for f in ("spec_target_sample", "spec_draft_sample")]:
    temp, topp = SETTINGS[setting]
    kern = lib.get(fam, 4, target="cuda")
    for B in ((1, 8, 32) if timing else (32,)):
        g = torch.Generator().manual_seed(B)
        rows = B if fam == "spec_draft_sample" else B * W
        d = dict(temperature=torch.full((B,), temp), top_k=torch.zeros(B, dtype=torch.int32), top_p=torch.full((B,), topp),
                 seed=torch.randint(0, 2**62, (B,), generator=g), seq_lens=torch.randint(0, 5000, (B,), generator=g).int(),
                 draft_tokens=torch.randint(0, V, (B, W - 1), generator=g).int(), draft_probs=torch.rand(B, W - 1, generator=g),
                 sample_positions=torch.randint(0, 10**6, (B,), generator=g),
                 target_tokens=torch.zeros(B, W, dtype=torch.int32), target_draft_probs=torch.zeros(B, W - 1),
                 accept_uniforms=torch.zeros(B, W - 1), sampled_tokens=torch.zeros(B, dtype=torch.int64), sampled_probs=torch.zeros(B))
        x = torch.randn(rows, V, generator=g) * 4
        d["logits"] = d["draft_logits"] = x
        d["sample_probs"] = d["draft_dist"] = torch.zeros(rows, V)
        d = {k: v.cuda() for k, v in d.items()}
        for C in (1, vocab_chunks(rows, V, SMS)):
            d["vocab_parts"] = torch.zeros(rows, C, 4, dtype=torch.int64, device="cuda")
            d["vocab_sums"] = torch.zeros(rows, VOCAB_SUMS, dtype=torch.int64, device="cuda")
            f = lambda: kern(*(d[a.name] for a in FAMILIES[fam].args))
            if not timing:
                for _ in range(3):
                    f()
                torch.cuda.synchronize()
                break
            f(); torch.cuda.synchronize()
            ts = []
            for _ in range(7):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(10):
                    f()
                b.record(); b.synchronize()
                ts.append(a.elapsed_time(b) * 100)
            r = dict(family=fam, setting=setting, B=B, C=C, us=round(statistics.median(ts), 1))
            print(r, flush=True); res.append(r)
    if not timing:
        break
if timing:
    json.dump(res, open(os.environ.get("OUT", "/tmp") + f"/time_{os.path.basename(sys.argv[1])}.json", "w"), indent=1)
