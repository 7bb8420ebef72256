"""Delta rule: the row-by-row kernel and its pipelined candidate (next row's inputs loaded before this row's
stores) at value tiles 16/32/64 x warps 1/2/4; us per launch in CUDA graphs; outputs and states vs the default.
python3 benchmarks/results/hybrid/gdn_ab_02cea21_h100/sweeps/delta_sweep_candidate.py OUT.json [cases], at fd3d406   (DEVICE=cpu with TRITON_INTERPRET=1: correctness only)"""
import importlib.util, json, os, statistics, sys
import torch, triton
sys.path.insert(0, os.path.dirname(__file__))
from specgen.models import triton_gdn as g
import delta_candidates as p
spec = importlib.util.spec_from_file_location("gdn_ab", "benchmarks/gdn_ab.py")
ab = importlib.util.module_from_spec(spec); spec.loader.exec_module(ab)
CPU = os.environ.get("TRITON_INTERPRET") == "1"
if CPU:
    torch.Tensor.cuda = lambda self: self

def launch(d, states, form, bv, warps):
    mixed, a_raw, b_raw = d["mixed"], d["a_raw"], d["b_raw"]
    b, r, _ = mixed.shape
    n, hv = a_raw.shape
    dv = states.shape[-1]
    out = torch.zeros(n, hv, dv, dtype=torch.float32, device=mixed.device)
    args = (mixed, a_raw, b_raw, d["a_log"], d["dt_bias"], states, d["rows"], d["read"], d["write"], out)
    args += (d["num_slots"], n, r, ab.DK**-0.5, a_raw.stride(0))
    shape = dict(HV=hv, GROUP=hv // ab.HK, DK=ab.DK, DV=dv, BK=ab.DK, BV=bv, num_warps=warps)
    grid = (triton.cdiv(dv, bv), b * hv)
    k = {"rows": g._delta_rule_slots_kernel, "pipe": p._delta_rule_pipe_kernel}[form]
    k[grid](*args, **shape)
    return out

def main(path, names):
    res = {"gpu": "interpreter" if CPU else torch.cuda.get_device_name()}
    for name in names:
        batch, rows_per, verify = ab.CASES[name]
        d = ab.inputs(batch, rows_per, verify)
        ref_states = d["states"].clone()
        ref = ab.calls(g, d)["delta_rule_slots"]
        want = ref[0]().float(); want_states = ref[1].clone()
        cells = {}
        for form in ("rows", "pipe"):
            for bv in ((32,) if CPU else (16, 32, 64)):
                for warps in ((4,) if CPU else (1, 2, 4)):
                    key = f"{form} bv{bv} w{warps}"
                    try:
                        st = ref_states.clone()
                        got = launch(d, st, form, bv, warps)
                        diff = max((got - want).abs().max().item(), (st - want_states).abs().max().item())
                        cell = {"max_abs_diff": diff}
                        if not CPU:
                            st = ref_states.clone()
                            graph = ab.graph_of(lambda st=st: launch(d, st, form, bv, warps))
                            times = []
                            for _ in range(3):
                                times += ab.replay_us(graph)
                            cell["us"] = round(statistics.median(times), 2)
                        cells[key] = cell
                    except Exception as e:
                        cells[key] = {"error": str(e)[:200]}
        res[name] = cells
        best = min(((v["us"], k) for k, v in cells.items() if "us" in v), default=None)
        print(name, "default", cells.get("rows bv32 w4"), "best", best, json.dumps(cells), flush=True)
    json.dump(res, open(path, "w"), indent=1)

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2].split(",") if len(sys.argv) > 2 else list(ab.CASES))
