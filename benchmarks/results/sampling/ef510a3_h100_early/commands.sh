#!/usr/bin/env bash
# one call at ef510a3 (early candidates): vocabulary GPU tests, the engine's greedy step and its sampled step with
# db745e6's kernels (bench_prev) and ef510a3's, the kernel A/B new5 -> new7 at spread 4, the sampling engine's GPU
# tests, memcheck over the early candidates' GPU test, the A/B at spread 1
set -u
O=/tmp/w; mkdir -p $O/engine; cp .snap/s/commit.txt $O/ 2>/dev/null
T0=$(date +%s)
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(( $(date +%s) - T0 ))"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
timeout 130 python3 -m pytest -m gpu -rA -p no:cacheprovider --timeout 100 tests/codegen/test_vocab_sample.py > $O/gpu_tests_vocab.txt 2>&1
echo "vocab tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR|PASSED)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-200 | tail -8
timeout 90 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/codegen/test_vocab_sample.py -k early > $O/sanitizer_early.txt 2>&1
echo "memcheck early rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "passed|failed|ERROR SUMMARY" $O/sanitizer_early.txt | tail -2
timeout 150 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/engine/test_sampling_engine.py \
  tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_sampling.txt 2>&1
echo "sampling tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_sampling.txt | cut -c1-160 | tail -4
mkdir -p $O/ab_s4
OUT=$O/ab_s4 VOCAB_AB_SPREAD=4 timeout 90 python3 benchmarks/vocab_ab.py time build/vocab_ab/new5 build/vocab_ab/new7 > $O/ab_s4.log 2>&1
echo "vocab_ab s4 rc=$? t=$(( $(date +%s) - T0 ))"; python3 benchmarks/vocab_ab.py report $O/ab_s4 > $O/ab_s4.md; grep -E "t0.7_p0.9" $O/ab_s4.md
mkdir -p $O/ab_s1
OUT=$O/ab_s1 VOCAB_AB_SPREAD=1 timeout 90 python3 benchmarks/vocab_ab.py time build/vocab_ab/new5 build/vocab_ab/new7 > $O/ab_s1.log 2>&1
echo "vocab_ab s1 rc=$? t=$(( $(date +%s) - T0 ))"; python3 benchmarks/vocab_ab.py report $O/ab_s1 > $O/ab_s1.md; grep -E "t0.7_p0.9" $O/ab_s1.md
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3"
T="--temperature 0.7 --top-p 0.9"
run() { n=$1; shift; timeout 80 $B "$@" --out $O/engine/$n > $O/engine/$n.log 2>&1; echo "$n rc=$? t=$(( $(date +%s) - T0 ))";
  rm -f $O/engine/$n/timeline.png
  python3 -c "import json; d=json.load(open('$O/engine/$n/bench.json')); print({r['batch']: r['step_us'] for r in d['runs']})" 2>&1 | tail -1; }
run greedy --kernels build/sampling_bench_kernels
run sampled_prev $T --kernels build/bench_prev
run sampled_new $T --kernels build/sampling_bench_kernels
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
