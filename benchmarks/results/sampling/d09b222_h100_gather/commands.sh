# The session's device scripts in order. The first two ran (d09b222's template; 4230ef6); the last two, for
# 3454d7e on branch vocab-pairwise, found no machine and did not run.
#!/usr/bin/env bash
# call 1 of session 43 (the gathered candidates): vocabulary GPU tests, the kernel A/B new8 (e1b2951) -> new11
# (gathered) at spreads 4 and 1, the engine's greedy step and its sampled step with e1b2951's kernels (bench_e1b)
# and the gathered ones (sampling_bench_kernels)
set -u
O=/tmp/w; mkdir -p $O/engine; echo "8157483 + the gathered candidates (working tree)" > $O/commit.txt
T0=$(date +%s)
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(( $(date +%s) - T0 ))"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
timeout 130 python3 -m pytest -m gpu -rA -p no:cacheprovider --timeout 100 tests/codegen/test_vocab_sample.py > $O/gpu_tests_vocab.txt 2>&1
echo "vocab tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-300 | tail -8
for S in 4 1; do
  mkdir -p $O/ab_s$S
  OUT=$O/ab_s$S VOCAB_AB_SPREAD=$S timeout 80 python3 benchmarks/vocab_ab.py time build/vocab_ab/new8 build/vocab_ab/new11 > $O/ab_s$S.log 2>&1
  echo "vocab_ab s$S rc=$? t=$(( $(date +%s) - T0 ))"; python3 benchmarks/vocab_ab.py report $O/ab_s$S > $O/ab_s$S.md; grep -E "t0.7_p0.9" $O/ab_s$S.md; tail -2 $O/ab_s$S.log
done
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3"
T="--temperature 0.7 --top-p 0.9"
run() { n=$1; shift; timeout ${LIM:-80} $B "$@" --out $O/engine/$n > $O/engine/$n.log 2>&1; echo "$n rc=$? t=$(( $(date +%s) - T0 ))";
  rm -f $O/engine/$n/timeline.png
  python3 -c "import json; d=json.load(open('$O/engine/$n/bench.json')); print({r['batch']: r['step_us'] for r in d['runs']})" 2>&1 | tail -1; }
run greedy --kernels build/sampling_bench_kernels
run sampled_new $T --kernels build/sampling_bench_kernels
run sampled_prev $T --kernels build/bench_e1b
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
# ----
#!/usr/bin/env bash
# call 2 of session 43 (the pairwise cut and draw): vocabulary GPU tests, memcheck over the early, every-bin and
# pairwise cases, the kernel A/B new8 (e1b2951) -> new11 (gathered) -> new12 (pairwise) at spreads 4 and 1, the
# engine (greedy; sampled with e1b2951 and with the pairwise kernels), the sampling engine GPU tests
set -u
O=/tmp/w; mkdir -p $O/engine; echo "4230ef6 (the pairwise cut and draw)" > $O/commit.txt
T0=$(date +%s)
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(( $(date +%s) - T0 ))"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
timeout 130 python3 -m pytest -m gpu -rA -p no:cacheprovider --timeout 100 tests/codegen/test_vocab_sample.py > $O/gpu_tests_vocab.txt 2>&1
echo "vocab tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-300 | tail -8
timeout 110 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/codegen/test_vocab_sample.py -k "early or every_bin" > $O/sanitizer_vocab.txt 2>&1
echo "memcheck rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "passed|failed|ERROR SUMMARY" $O/sanitizer_vocab.txt | tail -2
for S in 4 1; do
  mkdir -p $O/ab_s$S
  OUT=$O/ab_s$S VOCAB_AB_SPREAD=$S timeout 80 python3 benchmarks/vocab_ab.py time build/vocab_ab/new8 build/vocab_ab/new11 build/vocab_ab/new12 > $O/ab_s$S.log 2>&1
  echo "vocab_ab s$S rc=$? t=$(( $(date +%s) - T0 ))"; python3 benchmarks/vocab_ab.py report $O/ab_s$S > $O/ab_s$S.md; grep -E "t0.7_p0.9" $O/ab_s$S.md; tail -2 $O/ab_s$S.log
done
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3"
T="--temperature 0.7 --top-p 0.9"
run() { n=$1; shift; timeout ${LIM:-95} $B "$@" --out $O/engine/$n > $O/engine/$n.log 2>&1; echo "$n rc=$? t=$(( $(date +%s) - T0 ))";
  rm -f $O/engine/$n/timeline.png
  python3 -c "import json; d=json.load(open('$O/engine/$n/bench.json')); print({r['batch']: r['step_us'] for r in d['runs']})" 2>&1 | tail -1; }
run greedy --kernels build/sampling_bench_kernels
run sampled_new $T --kernels build/sampling_bench_kernels
run sampled_prev $T --kernels build/bench_e1b
timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/engine/test_sampling_engine.py \
  tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_sampling.txt 2>&1
echo "sampling tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_sampling.txt | cut -c1-160 | tail -4
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
# ----
#!/usr/bin/env bash
# call 3 of session 43 (the pairwise cut before any round): vocabulary GPU tests, memcheck over the early, every-bin and
# pairwise cases, the kernel A/B new8 (e1b2951) -> new12 (pairwise, before any round) at spreads 4 and 1, the
# engine (greedy; sampled with e1b2951 and with the pairwise kernels), the sampling engine GPU tests
set -u
O=/tmp/w; mkdir -p $O/engine; echo "3454d7e (the pairwise cut before any round)" > $O/commit.txt
T0=$(date +%s)
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(( $(date +%s) - T0 ))"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
timeout 130 python3 -m pytest -m gpu -rA -p no:cacheprovider --timeout 100 tests/codegen/test_vocab_sample.py > $O/gpu_tests_vocab.txt 2>&1
echo "vocab tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-300 | tail -8
timeout 110 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/codegen/test_vocab_sample.py -k "early or every_bin" > $O/sanitizer_vocab.txt 2>&1
echo "memcheck rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "passed|failed|ERROR SUMMARY" $O/sanitizer_vocab.txt | tail -2
for S in 4 1; do
  mkdir -p $O/ab_s$S
  OUT=$O/ab_s$S VOCAB_AB_SPREAD=$S timeout 80 python3 benchmarks/vocab_ab.py time build/vocab_ab/new8 build/vocab_ab/new12 > $O/ab_s$S.log 2>&1
  echo "vocab_ab s$S rc=$? t=$(( $(date +%s) - T0 ))"; python3 benchmarks/vocab_ab.py report $O/ab_s$S > $O/ab_s$S.md; grep -E "t0.7_p0.9" $O/ab_s$S.md; tail -2 $O/ab_s$S.log
done
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3"
T="--temperature 0.7 --top-p 0.9"
run() { n=$1; shift; timeout ${LIM:-95} $B "$@" --out $O/engine/$n > $O/engine/$n.log 2>&1; echo "$n rc=$? t=$(( $(date +%s) - T0 ))";
  rm -f $O/engine/$n/timeline.png
  python3 -c "import json; d=json.load(open('$O/engine/$n/bench.json')); print({r['batch']: r['step_us'] for r in d['runs']})" 2>&1 | tail -1; }
run greedy --kernels build/sampling_bench_kernels
run sampled_new $T --kernels build/sampling_bench_kernels
# (sampled_prev, e1b2951 in the engine, left out: the device time left; the kernel A/B compares them)
timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/engine/test_sampling_engine.py \
  tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_sampling.txt 2>&1
echo "sampling tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_sampling.txt | cut -c1-160 | tail -4
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
# ----
#!/usr/bin/env bash
# call 4 of session 43, at 3454d7e (the pairwise cut before any round), in the device time left: the vocabulary
# GPU tests, the sampling engine's GPU tests, the kernel A/B new8 (e1b2951) -> new12 (3454d7e) at spreads 4 and 1,
# then, while time is left, the engine's greedy and sampled steps and memcheck over the early and pairwise cases
set -u
O=/tmp/w; mkdir -p $O/engine; echo "3454d7e (the pairwise cut before any round)" > $O/commit.txt
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(el)"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
timeout 100 python3 -m pytest -m gpu -rA -p no:cacheprovider --timeout 90 tests/codegen/test_vocab_sample.py > $O/gpu_tests_vocab.txt 2>&1
echo "vocab tests rc=$? t=$(el)"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-300 | tail -6
timeout 100 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/engine/test_sampling_engine.py \
  tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_sampling.txt 2>&1
echo "sampling tests rc=$? t=$(el)"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_sampling.txt | cut -c1-160 | tail -4
for S in 4 1; do
  mkdir -p $O/ab_s$S
  OUT=$O/ab_s$S VOCAB_AB_SPREAD=$S timeout 40 python3 benchmarks/vocab_ab.py time build/vocab_ab/new8 build/vocab_ab/new12 > $O/ab_s$S.log 2>&1
  echo "vocab_ab s$S rc=$? t=$(el)"; python3 benchmarks/vocab_ab.py report $O/ab_s$S > $O/ab_s$S.md; grep -E "t0.7_p0.9" $O/ab_s$S.md
done
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3"
T="--temperature 0.7 --top-p 0.9"
run() { n=$1; shift; timeout 85 $B "$@" --out $O/engine/$n > $O/engine/$n.log 2>&1; echo "$n rc=$? t=$(el)";
  rm -f $O/engine/$n/timeline.png
  python3 -c "import json; d=json.load(open('$O/engine/$n/bench.json')); print({r['batch']: r['step_us'] for r in d['runs']})" 2>&1 | tail -1; }
if [ $(el) -lt 110 ]; then run greedy --kernels build/sampling_bench_kernels; run sampled_new $T --kernels build/sampling_bench_kernels; fi
if [ $(el) -lt 215 ]; then
  timeout 60 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -m gpu -q -p no:cacheprovider \
    tests/codegen/test_vocab_sample.py -k "early" > $O/sanitizer_vocab.txt 2>&1
  echo "memcheck rc=$? t=$(el)"; grep -E "passed|failed|ERROR SUMMARY" $O/sanitizer_vocab.txt | tail -2
fi
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
