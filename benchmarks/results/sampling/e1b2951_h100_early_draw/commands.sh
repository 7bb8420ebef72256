#!/usr/bin/env bash
# the three calls at e1b2951, in order (the first one's two A/B runs failed: new7's manifest still named
# sample_probs; the second call reran them after renaming it vocab_scratch, the same argument position)

# ---- c48
# call 1 at e1b2951 (the early draw): vocabulary GPU tests, the kernel A/B new7 (ef510a3) -> new8 (e1b2951) at
# spread 4 (and new9: no e written, the rounds recompute it from the logits), memcheck over the early cases,
# the A/B at spread 1
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
echo "vocab tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR|PASSED)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-200 | tail -8
mkdir -p $O/ab_s4
OUT=$O/ab_s4 VOCAB_AB_SPREAD=4 timeout 150 python3 benchmarks/vocab_ab.py time build/vocab_ab/new7 build/vocab_ab/new8 build/vocab_ab/new9 > $O/ab_s4.log 2>&1
echo "vocab_ab s4 rc=$? t=$(( $(date +%s) - T0 ))"; python3 benchmarks/vocab_ab.py report $O/ab_s4 > $O/ab_s4.md; grep -E "t0.7_p0.9" $O/ab_s4.md
timeout 100 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/codegen/test_vocab_sample.py -k early > $O/sanitizer_early.txt 2>&1
echo "memcheck early rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "passed|failed|ERROR SUMMARY" $O/sanitizer_early.txt | tail -2
mkdir -p $O/ab_s1
OUT=$O/ab_s1 VOCAB_AB_SPREAD=1 timeout 150 python3 benchmarks/vocab_ab.py time build/vocab_ab/new7 build/vocab_ab/new8 build/vocab_ab/new9 > $O/ab_s1.log 2>&1
echo "vocab_ab s1 rc=$? t=$(( $(date +%s) - T0 ))"; python3 benchmarks/vocab_ab.py report $O/ab_s1 > $O/ab_s1.md; grep -E "t0.7_p0.9" $O/ab_s1.md
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O

# ---- c50
# call 2 at e1b2951: the kernel A/B new7 (ef510a3, its manifest's sample_probs renamed vocab_scratch: the same
# position) -> new8 (e1b2951) -> new9 (no e written) at spreads 4 and 1, then the sampling engine's GPU tests
set -u
O=/tmp/w; mkdir -p $O; cp .snap/s/commit.txt $O/ 2>/dev/null
T0=$(date +%s)
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(( $(date +%s) - T0 ))"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
for S in 4 1; do
  mkdir -p $O/ab_s$S
  OUT=$O/ab_s$S VOCAB_AB_SPREAD=$S timeout 160 python3 benchmarks/vocab_ab.py time build/vocab_ab/new7 build/vocab_ab/new8 build/vocab_ab/new9 > $O/ab_s$S.log 2>&1
  echo "vocab_ab s$S rc=$? t=$(( $(date +%s) - T0 ))"; python3 benchmarks/vocab_ab.py report $O/ab_s$S > $O/ab_s$S.md; grep -E "t0.7_p0.9" $O/ab_s$S.md; tail -2 $O/ab_s$S.log
done
timeout 150 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/engine/test_sampling_engine.py \
  tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_sampling.txt 2>&1
echo "sampling tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_sampling.txt | cut -c1-160 | tail -4
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O

# ---- c49
# call 2 at e1b2951: the engine's greedy step, and its sampled step with ef510a3's kernels (bench_ef5) and
# e1b2951's (sampling_bench_kernels), medians of 3 runs
set -u
O=/tmp/w; mkdir -p $O/engine; cp .snap/s/commit.txt $O/ 2>/dev/null
T0=$(date +%s)
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(( $(date +%s) - T0 ))"
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3"
T="--temperature 0.7 --top-p 0.9"
run() { n=$1; shift; timeout ${LIM:-170} $B "$@" --out $O/engine/$n > $O/engine/$n.log 2>&1; echo "$n rc=$? t=$(( $(date +%s) - T0 ))";
  rm -f $O/engine/$n/timeline.png
  python3 -c "import json; d=json.load(open('$O/engine/$n/bench.json')); print({r['batch']: r['step_us'] for r in d['runs']})" 2>&1 | tail -1; }
LIM=120 run greedy --kernels build/sampling_bench_kernels
run sampled_new $T --kernels build/sampling_bench_kernels
run sampled_prev $T --kernels build/bench_ef5
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O

# ---- c51 (a fourth call, at f1f887d: e1b2951's kernels; build/vocab_trace is `python3 benchmarks/vocab_trace.py copy build/sampling_bench_kernels build/vocab_trace` on the build machine)
# call 4 at f1f887d (e1b2951's kernels): block 0's phases (vocab_trace) at B = 1, 8, 32, and Nsight Compute's DRAM
# bytes and instructions of spec_target_sample at B = 32 (C = 1) and B = 1 (C = 33), ef510a3's build against e1b2951's
set -u
O=/tmp/w; mkdir -p $O/trace; cp .snap/s/commit.txt $O/ 2>/dev/null
T0=$(date +%s)
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(( $(date +%s) - T0 ))"
OUT=$O/trace timeout 120 python3 benchmarks/vocab_trace.py run build/vocab_trace 1 8 32 > $O/trace/run.log 2>&1
echo "trace rc=$? t=$(( $(date +%s) - T0 ))"; ls $O/trace; head -40 $O/trace/*.md 2>/dev/null | cut -c1-150
M=dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed
for b in 32 1; do for k in new7 new8; do
  timeout 90 ncu --metrics $M -k regex:spec_target_sample --launch-skip 2 --launch-count 1 --csv \
    python3 benchmarks/vocab_ab.py ncu build/vocab_ab/$k $b > $O/ncu_b${b}_$k.csv 2>&1
  echo "ncu b$b $k rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "dram__bytes|inst_executed|time_duration|throughput" $O/ncu_b${b}_$k.csv | awk -F'","' '{print $(NF-2), $(NF-1), $NF}'
done; done
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
