#!/usr/bin/env bash
# call 1 at early-candidates: the vocabulary families bit for bit on the GPU, memcheck, the kernel A/B
# key (7d6abc1) / new5 (db745e6) / new7 (early candidates) at spreads 4 and 1
set -u
O=/tmp/w; mkdir -p $O; cp .snap/s/commit.txt $O/ 2>/dev/null
T0=$(date +%s)
( while true; do sleep 10; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(( $(date +%s) - T0 ))"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
timeout 150 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/codegen/test_vocab_sample.py > $O/gpu_tests_vocab.txt 2>&1
echo "vocab tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-200 | tail -3
mkdir -p /tmp/mc; OUT=/tmp/mc VOCAB_LIB=build/sampling_test_kernels timeout 80 compute-sanitizer --tool memcheck --report-api-errors no \
  python3 benchmarks/vocab_gpu.py check > $O/sanitizer_vocab.txt 2>&1
echo "memcheck rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "checks|ERROR SUMMARY" $O/sanitizer_vocab.txt | tail -2
for s in 4 1; do
  mkdir -p $O/ab_s$s
  OUT=$O/ab_s$s VOCAB_AB_SPREAD=$s timeout 100 python3 benchmarks/vocab_ab.py time build/vocab_ab/key build/vocab_ab/new5 build/vocab_ab/new7 > $O/ab_s$s.log 2>&1
  echo "vocab_ab s$s rc=$? t=$(( $(date +%s) - T0 ))"; python3 benchmarks/vocab_ab.py report $O/ab_s$s > $O/ab_s$s.md; grep -E "t0.7_p0.9" $O/ab_s$s.md
done
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
