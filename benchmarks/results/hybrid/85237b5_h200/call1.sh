#!/usr/bin/env bash
# call 1: the GPU tests of the changed code, then the hybrid bench (four modes, B = 1, 8, 32) with --draft-vocab 32768
set -u
O=$OUT; cp .snap/s/commit.txt $O/ 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
source benchmarks/h200_hybrid.sh $O
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
t0=$(date +%s)
timeout 210 python3 -m pytest -m gpu -rA -s -p no:cacheprovider tests/engine/test_draft_vocab_engine.py \
  tests/models/test_skinny_lm_head.py tests/models/test_skinny_table.py tests/models/test_cuda_forward.py \
  "tests/engine/test_sampling_engine.py::test_cuda_hybrid_target_samples_equally_in_baseline_and_specgen" \
  > $O/gpu_tests.txt 2>&1
echo "tests rc=$? in $(( $(date +%s) - t0 )) s"
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $O/gpu_tests.txt | cut -c1-160 | tail -14
t0=$(date +%s)
timeout 360 specgen bench --model qwen3.5-2b --depth 3 --batch 1,8,32 --steps 32 --profile-steps 8 --warmup 5 \
  --modes baseline,compile,inductor,specgen --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 16 \
  --draft-vocab 32768 --kernels build/hybrid_bench_kernels --out /tmp/dv > $O/bench_dv.log 2>&1
echo "bench dv: rc=$? in $(( $(date +%s) - t0 )) s"
mkdir -p $O/bench_dv; cp /tmp/dv/*.json /tmp/dv/*.png $O/bench_dv/ 2>/dev/null
grep -E "^bench: \[" $O/bench_dv.log | grep -v profiled | cut -c1-120
grep -v "^frame #" $O/bench_dv.log | grep -v "^bench: \[" | grep -E "^ +3 " | cut -c1-200
