# one call on an NVIDIA H100 80GB HBM3 at d53c007 (kernels prebuilt off the device: build/block_test_kernels,
# sampling_test_kernels, verify_test_kernels, engine_test_kernels, block_bench_kernels; benchmarks/h200.sh lists them)
export SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels
python3 -m pytest -m gpu -q -rfE --tb=short --durations=8 -p no:cacheprovider tests/engine/test_block_context.py \
  tests/engine/modes/test_block.py tests/bench/test_block_bench.py tests/runtime/test_device_guard_trips.py \
  tests/runtime/test_host_mirror.py tests/engine/test_draft_sampling.py tests/engine/test_sampling_engine.py  # gpu_tests.txt
# the base: main at c02e4c8 (git archive c02e4c8 | tar -x -C base), the capture order before d53c007
BASE=base ROUNDS=1 bash benchmarks/h200.sh OUT block-ab   # ab_*.md / ab_*.json, bench_*_{base,new}.json, the B = 1 traces
