#!/usr/bin/env bash
# session 44, call 1, at 28f053f (pair2: the pairwise cut and draw before any round, on main's c5c5c3c): the
# vocabulary GPU tests, memcheck over the early/pairwise/every-bin cases, the sampling engine's GPU tests, the
# kernel A/B new8 (e1b2951) / new11 (d09b222 = main) / new13 (pair2) at spreads 4 and 1, then the engine's
# greedy and sampled steps with pair2's kernels and sampled with main's
set -u
O=/tmp/w; mkdir -p $O/engine; echo "28f053f (pair2: pairwise cut and draw before any round)" > $O/commit.txt
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
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/codegen/test_vocab_sample.py -k "early or every_bin" > $O/sanitizer_vocab.txt 2>&1
echo "memcheck rc=$? t=$(el)"; grep -E "passed|failed|ERROR SUMMARY" $O/sanitizer_vocab.txt | tail -2
timeout 120 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/engine/test_sampling_engine.py \
  tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_sampling.txt 2>&1
echo "sampling tests rc=$? t=$(el)"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_sampling.txt | cut -c1-160 | tail -4
for S in 4 1; do
  mkdir -p $O/ab_s$S
  OUT=$O/ab_s$S VOCAB_AB_SPREAD=$S timeout 60 python3 benchmarks/vocab_ab.py time build/vocab_ab/new8 build/vocab_ab/new11 build/vocab_ab/new13 > $O/ab_s$S.log 2>&1
  echo "vocab_ab s$S rc=$? t=$(el)"; python3 benchmarks/vocab_ab.py report $O/ab_s$S > $O/ab_s$S.md; grep -E "t0.7_p0.9" $O/ab_s$S.md
done
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3"
T="--temperature 0.7 --top-p 0.9"
run() { n=$1; shift; timeout 90 $B "$@" --out $O/engine/$n > $O/engine/$n.log 2>&1; echo "$n rc=$? t=$(el)";
  rm -f $O/engine/$n/timeline.png
  python3 -c "import json; d=json.load(open('$O/engine/$n/bench.json')); print({r['batch']: r['step_us'] for r in d['runs']})" 2>&1 | tail -1; }
run greedy --kernels build/sampling_bench_kernels
run sampled_new $T --kernels build/sampling_bench_kernels
if [ $(el) -lt 470 ]; then run sampled_main $T --kernels build/bench_main; fi
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
