#!/bin/bash
# carry: ["build/hybrid_test_kernels","build/sampling_test_kernels",".whl",".snap/s"]
# The chunked dispatch (takes_chunked) at the commit in commit.txt: the delta rule's prefill cases, then the hybrid GPU
# tests.
set -u
W=/tmp/wn3; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
source benchmarks/h200_hybrid.sh $W
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu_name.txt; cat $W/gpu_name.txt
export SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels \
  SPECGEN_SERVE_SOAK_REQUESTS=100 SPECGEN_FAILURES_TO=$W/failures.txt
timeout 200 python3 -m pytest -m gpu -rA -s -p no:cacheprovider --durations=10 tests/models/test_triton_gdn.py \
  tests/engine/modes/test_hybrid.py tests/engine/serving/test_loop_hybrid_cuda.py \
  > $W/gpu_tests.txt 2>&1
echo "tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|FAILED|ERROR|soak" $W/gpu_tests.txt | cut -c1-300 | tail -8; pack
timeout 45 python3 benchmarks/gdn_tile_sweep.py $W/gdn_prefill_sweep.json 16 1 \
  prefill_b2_r512,prefill_b1_r64 > $W/gdn_prefill_sweep.txt 2>&1
echo "sweep exit $? at $(( $(date +%s) - T0 )) s"; cut -c1-260 $W/gdn_prefill_sweep.txt; pack
