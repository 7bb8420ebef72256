#!/usr/bin/env bash
# the final call at 819c308 (e1b2951's kernels): the vocabulary GPU tests, memcheck over the early and every-bin
# cases, vocab_gpu.py's checks, the sampling engine's GPU tests
set -u
O=/tmp/w; mkdir -p $O; cp .snap/s/commit.txt $O/ 2>/dev/null
T0=$(date +%s)
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(( $(date +%s) - T0 ))"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
timeout 130 python3 -m pytest -m gpu -rA -p no:cacheprovider --timeout 100 tests/codegen/test_vocab_sample.py > $O/gpu_tests_vocab.txt 2>&1
echo "vocab tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-200 | tail -8
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/codegen/test_vocab_sample.py -k "early or every_bin" > $O/sanitizer_vocab.txt 2>&1
echo "memcheck rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "passed|failed|ERROR SUMMARY" $O/sanitizer_vocab.txt | tail -2
OUT=$O VOCAB_LIB=build/sampling_test_kernels timeout 90 python3 benchmarks/vocab_gpu.py check > $O/vocab_gpu_check.txt 2>&1
echo "vocab_gpu check rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $O/vocab_gpu_check.txt
timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/engine/test_sampling_engine.py \
  tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_sampling.txt 2>&1
echo "sampling tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_sampling.txt | cut -c1-160 | tail -4
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
