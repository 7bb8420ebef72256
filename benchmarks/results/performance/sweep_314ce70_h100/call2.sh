#!/bin/bash
# call 2: GPU tests at HEAD, then Qwen3-0.6B depths 3, 5, 4, four modes
set -u
W=/tmp/wq2; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
bash benchmarks/h200.sh $W; echo "install $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu_name.txt; cat $W/gpu_name.txt
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels \
  SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels SPECGEN_SERVE_SOAK_REQUESTS=100
timeout 200 python3 -m pytest -m gpu -rA -p no:cacheprovider --durations=10 \
  tests/engine/test_engine.py tests/engine/test_one_stream.py tests/engine/modes/test_block.py \
  tests/engine/modes/test_block_draft_at_end.py \
  tests/runtime/test_device_guard_trips.py tests/engine/serving/test_loop_cuda.py tests/runtime/test_verify_graph.py \
  > $W/gpu_tests.txt 2>&1
echo "tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|FAILED|ERROR" $W/gpu_tests.txt | tail -8; pack
left() { echo $(( 588 - ($(date +%s) - T0) )); }
B="--batch 1,8,32 --profile-steps 8 --warmup 10 --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 64 --kernels build/specgen_kernels"
for spec in "qwen3-0.6b 3 64 bench_d3" "qwen3-0.6b 5 64 bench_d5" "qwen3-0.6b 4 64 bench_d4"; do set -- $spec
  [ $(left) -lt 100 ] && { echo "skip $4"; continue; }
  timeout $(left) specgen bench --model $1 --depth $2 --steps $3 --modes baseline,compile,inductor,specgen $B \
    --out $W/$4 > $W/$4.log 2>&1
  echo "$4: exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^ +$2 " $W/$4.log; pack
done
find $W -name '*.json.gz' -size +3M -delete; pack
echo "total $(( $(date +%s) - T0 )) s"
