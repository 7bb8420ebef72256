# Three calls on one NVIDIA H100 80GB HBM3 (kernels prebuilt off the device; benchmarks/h200.sh lists the builds).
# Call 1, at 15d3173 (the fused prologue), base = main at 74a9e06 (git archive 74a9e06 | tar -x -C base):
export SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels
python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/engine/test_block_context.py \
  tests/engine/modes/test_block.py tests/bench/test_block_bench.py tests/runtime/test_device_guard_trips.py \
  tests/runtime/test_host_mirror.py tests/engine/test_draft_sampling.py tests/engine/test_sampling_engine.py \
  tests/engine/serving/test_loop.py                               # gpu_tests.txt
BASE=base ROUNDS=1 bash benchmarks/h200.sh OUT block-ab          # ab_*.md, ab_*.json, bench_*_{base,new}.json, traces
# Call 2, at ed84c95 (the host mirror's wait before the pack), base = main at 9aa3a53 (fused):
BASE=base ROUNDS=1 bash benchmarks/h200.sh OUT block-ab          # mirror_wait_end/ab_d*.md
bash benchmarks/tree_ab.sh OUT/mtp_ab base 1 --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 64 --warmup 3 \
  --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 64 --kernels build/specgen_kernels \
  --modes specgen                                                 # mirror_wait_end/ab_mtp_d3.md
# Call 3, at 35e30b6 (the revert; the tree of 3ed4c03), base = main at 37a3d38 (fused):
for spec in "dflash 15" "dspark 7"; do set -- $spec
  bash benchmarks/tree_ab.sh OUT/ab_$1 base 2 --model qwen3-0.6b --draft $1 --depth $2 --batch 1,8 --steps 64 \
    --warmup 3 --acceptance 0.7 --block-table-width 80 --kernels build/block_bench_kernels --modes specgen
done                                                              # own_graph/ab_*.md, bench_*_{base,new}_{1,2}.json
