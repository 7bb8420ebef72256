# Call 2, at b03c423, one NVIDIA H100 80GB HBM3 (driver 580.159.04), the same kernel folders as call 1.
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels \
  SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels
SPECGEN_GRAPH_DUMPS=dots python3 -m pytest -m gpu -v tests/runtime/test_device_guard_trips.py \
  tests/engine/test_one_stream.py tests/models/test_triton_argmax.py tests/engine/test_block_context.py \
  tests/engine/modes/test_block.py tests/bench/test_graph_nodes.py tests/bench/test_graph_shapes.py \
  tests/engine/test_engine.py::test_cuda_modes_lossless > gpu_tests.txt
python3 benchmarks/graph_shapes.py --steps 100 --repeats 3 --out graph_shapes.json > graph_shapes.txt
# DFlash's argmax over whole rows: 7bd6c0d's tree against b03c423, one round, no profiled steps
bash benchmarks/tree_ab.sh block_ab_dflash .snap/base 1 --model qwen3-0.6b --draft dflash --depth 15 \
  --batch 1,8,32 --steps 48 --warmup 3 --acceptance 0.7 --block-table-width 80 \
  --kernels build/block_bench_kernels --modes specgen --profile-steps 0
