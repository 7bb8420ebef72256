#!/usr/bin/env bash
# session 45: four calls on one warm H100 (asked as nvidia-h200), in order. Calls A and B ran at 506c6f2 (the tiles
# opt-in); call C at 506c6f2 with engine/sampling.py's default switched on (the next commit); call D, the hybrid set,
# at the same tree, cut by its 290 s limit (../../hybrid/506c6f2_h100_partial/).
# --- call A
# session 45, call A, at main (the logit tiles, opt-in): the vocabulary GPU tests (five families), the skinny LM head's
# (its tiles), the sampling engine's (with and without SPECGEN_LOGIT_TILES=1), the draft-vocabulary and drafts-that-
# sample engine tests, memcheck over the given-tiles and early cases, then the kernel A/B plain against tiles
set -u
O=/tmp/w; mkdir -p $O; cp .snap/s/commit.txt $O/commit.txt
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(el)"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/codegen/test_vocab_sample.py tests/models/test_skinny_lm_head.py > $O/gpu_tests_vocab.txt 2>&1
echo "vocab+skinny tests rc=$? t=$(el)"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-300 | tail -6
timeout 200 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/engine/test_sampling_engine.py \
  tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_sampling.txt 2>&1
echo "sampling tests rc=$? t=$(el)"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_sampling.txt | cut -c1-200 | tail -5
timeout 130 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/codegen/test_vocab_sample.py -k "given or early" > $O/sanitizer_vocab.txt 2>&1
echo "memcheck rc=$? t=$(el)"; grep -E "passed|failed|ERROR SUMMARY" $O/sanitizer_vocab.txt | tail -2
for S in 4 1; do
  mkdir -p $O/ab_s$S
  for TL in 0 1; do
    OUT=$O/ab_s$S VOCAB_AB_SPREAD=$S VOCAB_AB_TILES=$TL timeout 60 python3 benchmarks/vocab_ab.py time build/sampling_test_kernels > $O/ab_s${S}_t$TL.log 2>&1
    echo "vocab_ab s$S tiles=$TL rc=$? t=$(el)"
  done
  python3 benchmarks/vocab_ab.py report $O/ab_s$S > $O/ab_s$S.md; grep -E "t0.7_p0.9" $O/ab_s$S.md
done
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
# --- call B
# session 45, call B, at main: the engine's greedy step, and its sampled step without the logit tiles, with them,
# and with them but the head's skinny GEMM kept to 64 rows (medians of 3 runs each)
set -u
O=/tmp/w; mkdir -p $O/engine; cp .snap/s/commit.txt $O/commit.txt
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(el)"
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3 --kernels build/sampling_bench_kernels"
T="--temperature 0.7 --top-p 0.9"
run() { n=$1; shift; timeout 120 env "$@" --out $O/engine/$n > $O/engine/$n.log 2>&1; echo "$n rc=$? t=$(el)";
  rm -f $O/engine/$n/timeline.png
  python3 -c "import json; d=json.load(open('$O/engine/$n/bench.json')); print({r['batch']: r['step_us'] for r in d['runs']})" 2>&1 | tail -1; }
run greedy $B
run sampled_no_tiles SPECGEN_LOGIT_TILES=0 $B $T
run sampled_tiles SPECGEN_LOGIT_TILES=1 $B $T
run sampled_tiles_head64 SPECGEN_LOGIT_TILES=1 SPECGEN_SKINNY_LM_HEAD=64 $B $T
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
# --- call C
# session 45, call C, at the commit that makes the logit tiles the sampling engine's default: its GPU tests again
set -u
O=/tmp/w6; mkdir -p $O; git -C . rev-parse HEAD > $O/commit.txt 2>/dev/null; cp .snap/s/commit.txt $O/
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
timeout 250 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/codegen/test_vocab_sample.py tests/models/test_skinny_lm_head.py \
  tests/engine/test_sampling_engine.py tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_default_on.txt 2>&1
echo "tests rc=$?"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_default_on.txt | cut -c1-200 | tail -5
tar czf $OUT/runs6.tgz -C $O .
# --- call D
O=/tmp/w7; mkdir -p $O; (timeout 290 bash benchmarks/h200_hybrid.sh $O tests) 2>&1 | tail -15
