#!/bin/bash
# call 2: GPU tests (64-row LM-head default, graph dump fix, mapped host fields with side streams, block carry kernel),
# then mirror-ab (MTP depth 3, DFlash depth 15; one round)
set -u
W=/tmp/w; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cat .snap/s/commit.txt > $OUT/commit.txt
T0=$(date +%s)
python3 -m pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1 || tail -5 $W/install.log
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels \
  SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels
SPECGEN_SERVE_SOAK_REQUESTS=100 timeout 130 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider --durations=15 \
  tests/engine/test_one_stream.py tests/bench/test_graph_nodes.py tests/models/test_skinny_lm_head.py \
  tests/engine/test_engine.py tests/engine/modes/test_block.py tests/runtime/test_host_mirror_mapped.py \
  tests/runtime/test_device_guard_trips.py tests/engine/serving/test_loop_cuda.py tests/runtime/test_verify_graph.py \
  > $W/gpu_tests.txt 2>&1
echo "tests exit $? $(( $(date +%s) - T0 )) s"; tail -3 $W/gpu_tests.txt; cp $W/gpu_tests.txt $OUT/; pack
MIRRORS="mtp 3,dflash 15" BENCH_KERNELS=build/bench_w4 ROUNDS=1 timeout $(( 270 - ($(date +%s) - T0) )) \
  bash benchmarks/h200.sh $W mirror-ab 2>&1 | tail -40
pack; echo "total $(( $(date +%s) - T0 )) s"
