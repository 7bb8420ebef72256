#!/bin/bash
# Next session's first call. Before it, here:
#   git am .snap/s/pending/0001-models-argmax_kernels-*.patch   (the hybrid's argmax on the Triton kernel; CPU tests
#   passed: tests/engine/modes/test_hybrid.py tests/models/test_qwen3_5*.py sampling -k hybrid: 54 passed)
#   git rev-parse --short HEAD > .snap/s/commit.txt
# carry: ["build/hybrid_test_kernels","build/sampling_test_kernels","build/hybrid_bench_kernels",".whl",".snap/s"]
# 1. gdn_tile_sweep (row-by-row tiles x warps and the chunked matrix form's cells: sets CHUNKED_FROM_ROWS);
# 2. argmax_speed at the hybrid's vocabulary (bf16, 248320); 3. the hybrid GPU tests (chunked tile included);
# second call: .snap/s/next2.sh (memcheck of the chunked forms, the four-mode bench) at the same commit.
set -u
W=/tmp/wn; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
source benchmarks/h200_hybrid.sh $W
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu_name.txt; cat $W/gpu_name.txt
timeout 130 python3 benchmarks/gdn_tile_sweep.py $W/gdn_tile_sweep.json 16,32 1 > $W/gdn_tile_sweep.txt 2>&1
echo "sweep exit $? at $(( $(date +%s) - T0 )) s"; cut -c1-300 $W/gdn_tile_sweep.txt; pack
timeout 40 python3 benchmarks/argmax_speed.py --vocab 248320 --rows 1,8,32,128 --out $W/argmax_speed_248320.json 2>&1 | tail -4; pack
export SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels \
  SPECGEN_SERVE_SOAK_REQUESTS=100 SPECGEN_FAILURES_TO=$W/failures.txt
timeout 350 python3 -m pytest -m gpu -rA -s -p no:cacheprovider --durations=10 tests/models/test_triton_gdn.py \
  tests/engine/modes/test_hybrid.py tests/runtime/test_linear_state_runtime.py tests/engine/serving/test_loop_hybrid_cuda.py \
  "tests/engine/test_sampling_engine.py::test_cuda_hybrid_target_samples_equally_in_baseline_and_specgen" \
  > $W/gpu_tests.txt 2>&1
echo "tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|FAILED|ERROR|soak|chunked delta" $W/gpu_tests.txt | cut -c1-300 | tail -12; pack
