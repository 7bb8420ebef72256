# Call 1, at d6d2c4f, one NVIDIA H100 80GB HBM3 (driver 580.159.04); the call's script, its stages in order.
# Kernels built here and carried: benchmarks/build_gpu_kernels.sh verify_test_kernels engine_test_kernels \
#   block_test_kernels block_bench_kernels, and
#   specgen build --target cuda --widths 4 --block-table-widths 64 --block-sizes 128 --draft-dtypes int32 \
#     --boundary draft-to-verify,verify-to-draft --out build/bench_w4
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels \
  SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels
python3 -m pytest -m gpu -v tests/runtime/test_device_guard_trips.py tests/engine/test_one_stream.py \
  tests/models/test_triton_argmax.py tests/engine/test_block_context.py tests/engine/modes/test_block.py \
  tests/engine/test_engine.py::test_cuda_modes_lossless > gpu_tests.txt
# side streams (the default) against --no-side-streams, MTP depth 3, two interleaved rounds
BENCH_KERNELS=build/bench_w4 ROUNDS=2 STREAMS="mtp 3" bash benchmarks/h200.sh OUT streams-ab
# the block drafts' argmax and Markov GEMM on the fast kernels: 7bd6c0d's tree (git archive 7bd6c0d | tar -x -C
# .snap/base) against the checkout, one round
BASE=.snap/base ROUNDS=1 bash benchmarks/h200.sh OUT block-ab
python3 benchmarks/graph_shapes.py --out graph_shapes.json > graph_shapes.txt
