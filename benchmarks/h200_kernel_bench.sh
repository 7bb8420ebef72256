#!/usr/bin/env bash
# The kernel-level bench on the H200: four modes (baseline, compile, inductor, specgen), depths 3-5, batches
# 1, 8, 32, acceptance 0.7, Qwen3-0.6B shapes; bench.json with the kernel-level figures and capture times,
# the profiled steps' traces (traces/*.json.gz, Perfetto / chrome://tracing), the cost model's calibration
# (costs.json) and its predicted-vs-measured table (compare.md / compare.json), timeline.png and
# kernel_timeline.png, then the GPU tests of the new pieces.  Kernels come prebuilt (no TileLang there):
#   specgen build --target cuda --widths 4-6 --block-table-widths 32 --block-sizes 16 --draft-dtypes int32 \
#       --boundary draft-to-verify,verify-to-draft --out build/bench_kernels
#   specgen build --target c,cuda --widths 2-6 --block-table-widths 8 --block-sizes 16 --draft-dtypes int32 \
#       --boundary draft-to-verify,verify-to-draft --out build/engine_test_kernels   (for the tests)
# One bench per depth, each under its own time limit, so a slow depth still leaves the others' results.
# Usage: benchmarks/h200_kernel_bench.sh OUT_DIR [STEPS]   (about 5-6 minutes in all)
set -u
out=${1:?usage: $0 OUT_DIR [STEPS]}; steps=${2:-24}
mkdir -p "$out"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { cat "$out/install.log"; exit 1; }
test -f build/bench_kernels/manifest.json || { echo "build/bench_kernels is missing (see the header)"; exit 1; }
export SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$out/.inductor_cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
t0=$SECONDS
for depth in 3 4 5; do
  timeout 125 python3 -m specgen bench --model qwen3-0.6b --depth $depth --batch 1,8,32 --steps "$steps" --warmup 3 \
    --profile-steps 8 --bare-repeats 20 --modes baseline,compile,inductor,specgen --acceptance 0.7 \
    --kernels build/bench_kernels --out "$out/bench_d$depth" > "$out/bench_d$depth.log" 2>&1
  echo "depth $depth: exit $? after $((SECONDS - t0)) s"
  grep -v "^frame #" "$out/bench_d$depth.log" | grep -v "^bench: \[" | tail -32
done
# self-check: every finished run of every depth has the new fields; the kernel figures are there on CUDA
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1]); bad = 0
for f in sorted(out.glob("bench_d*/bench.json")):
    r = json.loads(f.read_text())
    for run in r["runs"]:
        if "error" in run:
            print(f"{f.parent.name}: {run['mode']} B={run['batch']} failed: {run['error']}"); bad += 1; continue
        figs = {k: run.get(k) for k in ("kernel_draft_to_verify_us", "head_us", "kernel_verify_to_draft_us",
                                         "capture_s", "kernel_attribution", "kernel_trace")}
        ok = all(v is not None for v in figs.values()) and (f.parent / run["kernel_trace"]).exists()
        bad += not ok
        print(f"{f.parent.name} B={run['batch']:>2} {run['mode']:>8}: TPOT {run['tpot_ms']} ms, d->v "
              f"{run.get('draft_to_verify_us')} us (events), {figs} {'' if ok else '  <-- MISSING'}")
    print(f.parent.name, "ratios:", r["ratios"])
print("self-check:", "OK" if bad == 0 else f"{bad} run(s) missing fields")
PY
# the cost model against the measurement: default costs and the run's own calibration (costs.json)
for depth in 3 4 5; do
  d="$out/bench_d$depth"
  test -f "$d/costs.json" || { echo "bench_d$depth: no costs.json  <-- MISSING"; continue; }
  python3 -m specgen plan --compare "$d/bench.json" --costs "$d/costs.json" | tee "$d/compare.md"
done
timeout 150 python3 -m pytest -q -s -p no:cacheprovider tests/bench/test_bench_kernels.py tests/engine/modes/test_inductor.py \
  2>&1 | tail -25 | tee "$out/gpu_tests.txt"
rm -rf "$out/.inductor_cache"
echo "total $((SECONDS - t0)) s"
