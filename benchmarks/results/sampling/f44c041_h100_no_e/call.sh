# session 46, one call on one H100 (asked as nvidia-h100-x1), at f44c041 with no_e.patch applied in the working tree
# (build/sampling_test_kernels_noe, build/sampling_bench_noe: the patched kernels; build/vs_main: f44c041's vocabulary
# families); cut at 310 s during the engine runs
# session 46, one call: main + the tiles families' noe (the working tree). The vocabulary families' and skinny head's
# GPU tests on the noe build; the kernel A/B (main's tiles family, build/vs_main, against noe's), peaked and flat rows;
# the engine's sampled step with main's and noe's kernels (medians of 3); the sampling engine's
# GPU tests on the noe build; block 0's phase trace of noe's tiles family
set -u
O=/tmp/w; mkdir -p $O/engine; cp .snap/s/commit.txt $O/commit.txt
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
( while true; do sleep 8; tar czf $OUT/runs.tgz.part -C $O . 2>/dev/null && mv $OUT/runs.tgz.part $OUT/runs.tgz; done ) &
TARS=$!
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader > $O/gpu.txt 2>&1; cat $O/gpu.txt
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
echo "install t=$(el)"
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels_noe
timeout 100 python3 -m pytest -m gpu -rA -p no:cacheprovider tests/codegen/test_vocab_sample.py tests/models/test_skinny_lm_head.py > $O/gpu_tests_vocab.txt 2>&1
echo "vocab+skinny tests rc=$? t=$(el)"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_vocab.txt | cut -c1-300 | tail -4
for S in 4 1; do
  mkdir -p $O/ab_s$S
  for F in build/vs_main build/sampling_test_kernels_noe; do
    OUT=$O/ab_s$S VOCAB_AB_SPREAD=$S VOCAB_AB_TILES=1 timeout 40 python3 benchmarks/vocab_ab.py time $F >> $O/ab_s$S.log 2>&1
    echo "vocab_ab s$S $F rc=$? t=$(el)"
  done
  python3 benchmarks/vocab_ab.py report $O/ab_s$S > $O/ab_s$S.md 2>&1; grep -E "t0.7_p0.9" $O/ab_s$S.md
done
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3"
T="--temperature 0.7 --top-p 0.9"
run() { n=$1; shift; timeout 100 "$@" --out $O/engine/$n > $O/engine/$n.log 2>&1; echo "$n rc=$? t=$(el)";
  rm -f $O/engine/$n/timeline.png
  python3 -c "import json; d=json.load(open('$O/engine/$n/bench.json')); print({r['batch']: r['step_us'] for r in d['runs']})" 2>&1 | tail -1; }
run sampled_main $B $T --kernels build/sampling_bench_kernels
run sampled_noe $B $T --kernels build/sampling_bench_noe
[ $(el) -lt 220 ] && timeout $(( 300 - $(el) )) python3 -m pytest -m gpu -rA -p no:cacheprovider tests/engine/test_sampling_engine.py \
  tests/engine/test_draft_vocab_engine.py tests/engine/test_draft_sampling.py > $O/gpu_tests_sampling.txt 2>&1
echo "sampling tests rc=$? t=$(el)"; grep -E "^(FAILED|ERROR)|passed|failed" $O/gpu_tests_sampling.txt | cut -c1-200 | tail -4
[ $(el) -lt 290 ] && mkdir -p $O/trace_noe && OUT=$O/trace_noe VOCAB_AB_TILES=1 timeout 40 python3 benchmarks/vocab_trace.py run build/vt_noe 1 8 32 > $O/trace_noe.log 2>&1
echo "trace noe rc=$? t=$(el)"; grep -E "runs," $O/trace_noe.log
kill $TARS; tar czf $OUT/runs.tgz -C $O . ; ls $O
