#!/bin/bash
# call 1: head-ab (cuBLAS / skinny / one stream, 2 rounds) then the GPU tests of the unrun commits at the skinny default
set -u
W=/tmp/w; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cat .snap/s/commit.txt > $OUT/commit.txt
T0=$(date +%s)
BENCH_KERNELS=build/bench_w4 ROUNDS=2 timeout 330 bash benchmarks/h200.sh $W head-ab 2>&1 | tail -30
echo "head-ab $(( $(date +%s) - T0 )) s"; pack
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels \
  SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels
left=$(( 570 - ($(date +%s) - T0) ))
timeout $left python3 -m pytest -m gpu -q -rfE -p no:cacheprovider --durations=25 \
  tests/runtime/test_host_mirror_mapped.py tests/bench tests/models/test_skinny_lm_head.py \
  tests/models/test_cuda_forward.py tests/models/test_triton_argmax.py tests/engine/test_one_stream.py \
  tests/engine/test_engine.py tests/engine/modes/test_block.py tests/engine/test_block_context.py \
  tests/engine/test_kv_isolation.py tests/engine/modes/test_inductor.py > $W/gpu_tests.txt 2>&1
echo "tests exit $?"; tail -45 $W/gpu_tests.txt | grep -v "^$" | tail -40; cp $W/gpu_tests.txt $OUT/; pack
echo "total $(( $(date +%s) - T0 )) s"
