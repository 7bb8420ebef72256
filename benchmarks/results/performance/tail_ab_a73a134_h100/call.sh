#!/bin/bash
# call 1: GPU tests at HEAD (the engine's turnaround fix of 93a8421 and draft_at_end), then tail-ab (block drafts in
# their own graph against at the step graph's end), 2 rounds
set -u
W=/tmp/wq1; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
bash benchmarks/h200.sh $W; echo "install $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu_name.txt; cat $W/gpu_name.txt
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels \
  SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels SPECGEN_SERVE_SOAK_REQUESTS=100
timeout 220 python3 -m pytest -m gpu -rA -p no:cacheprovider --durations=10 \
  tests/engine/test_engine.py tests/engine/test_one_stream.py tests/engine/modes/test_block.py \
  tests/engine/modes/test_block_draft_at_end.py \
  tests/runtime/test_device_guard_trips.py tests/engine/serving/test_loop_cuda.py tests/runtime/test_verify_graph.py \
  > $W/gpu_tests.txt 2>&1
echo "tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|FAILED|ERROR" $W/gpu_tests.txt | tail -8; pack
ROUNDS=2 timeout $(( 585 - ($(date +%s) - T0) )) bash benchmarks/h200.sh $W tail-ab > $W/tail_ab.log 2>&1
echo "tail-ab exit $? at $(( $(date +%s) - T0 )) s"; cat $W/tail_ab.log | tail -40; pack
