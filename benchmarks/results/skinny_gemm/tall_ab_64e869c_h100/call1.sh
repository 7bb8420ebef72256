#!/usr/bin/env bash
# call 1: the skinny GEMM's tall sweep (qwen3.5-2b, 32 rows; its JSON also kept in build/tall/ for call 2), then
# the hybrid GPU test set with the skinny tests
set -u
O=$OUT; cp .snap/s/commit.txt $O/ 2>/dev/null
nvidia-smi --query-gpu=name,memory.total --format=csv > $O/gpu.txt 2>&1; cat $O/gpu.txt
source benchmarks/h200_hybrid.sh $O
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
t0=$(date +%s)
timeout 200 python3 benchmarks/skinny_gemm_sweep.py --model qwen3.5-2b --tall --rows 32 --out $O/tall_sweep.json > $O/tall_sweep.log 2>&1
echo "sweep rc=$? in $(( $(date +%s) - t0 )) s"
mkdir -p build/tall && cp $O/tall_sweep.json build/tall/sweep.json
tail -16 $O/tall_sweep.log
t0=$(date +%s)
timeout 320 python3 -m pytest -m gpu -rA -s -p no:cacheprovider tests/models/test_triton_gdn.py tests/engine/modes/test_hybrid.py \
  tests/runtime/test_linear_state_runtime.py tests/engine/serving/test_loop_hybrid_cuda.py tests/models/test_skinny_lm_head.py \
  tests/models/test_skinny_table.py tests/models/test_cuda_forward.py \
  "tests/engine/test_sampling_engine.py::test_cuda_hybrid_target_samples_equally_in_baseline_and_specgen" \
  > $O/gpu_tests.txt 2>&1
echo "tests rc=$? in $(( $(date +%s) - t0 )) s"
grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests.txt | tail -8
