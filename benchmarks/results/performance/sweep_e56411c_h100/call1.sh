#!/bin/bash
# call 1: the GPU tests at HEAD, Qwen3-0.6B depth 3 four modes (the host clock's first GPU run), the block drafts
set -u
W=/tmp/w; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
bash benchmarks/h200.sh $W; echo "install $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu.txt; cat $W/gpu.txt
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels \
  SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels SPECGEN_SERVE_SOAK_REQUESTS=100
timeout 175 python3 -m pytest -m gpu -rA -p no:cacheprovider --durations=15 \
  tests/engine/test_one_stream.py tests/runtime/test_device_guard_trips.py tests/engine/serving/test_loop_cuda.py \
  tests/engine/test_engine.py tests/engine/modes/test_block.py tests/bench/test_graph_nodes.py \
  tests/runtime/test_host_mirror_mapped.py tests/runtime/test_verify_graph.py \
  > $W/gpu_tests.txt 2>&1
echo "tests exit $? at $(( $(date +%s) - T0 )) s"; grep -E "passed|failed|FAILED|ERROR" $W/gpu_tests.txt | tail -15; pack
left() { echo $(( 588 - ($(date +%s) - T0) )); }
B="--batch 1,8,32 --profile-steps 8 --warmup 10 --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 64 --kernels build/specgen_kernels"
timeout $(left) specgen bench --model qwen3-0.6b --depth 3 --steps 64 --modes baseline,compile,inductor,specgen $B \
  --out $W/bench_d3 > $W/bench_d3.log 2>&1
echo "bench d3: exit $? at $(( $(date +%s) - T0 )) s"; grep -v "^frame #" $W/bench_d3.log | grep -v "^bench: \[" | tail -16; pack
for spec in "dflash 15" "dspark 7"; do set -- $spec
  [ $(left) -lt 60 ] && break
  timeout $(left) specgen bench --model qwen3-0.6b --draft $1 --depth $2 --batch 1,8,32 --steps 64 --warmup 3 --acceptance 0.7 \
    --block-table-width 80 --kernels build/block_bench_kernels --out "$W/bench_$1" > "$W/bench_$1.log" 2>&1
  echo "block bench $1: exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^ +$2 " $W/bench_$1.log; pack
done
find $W -name '*.json.gz' -size +3M -delete; pack
echo "total $(( $(date +%s) - T0 )) s"
