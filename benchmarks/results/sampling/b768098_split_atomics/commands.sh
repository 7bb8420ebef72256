# b768098: the vocabulary pass's shared 64-bit sums as 32-bit halves, warp-shuffle trees, no per-token sync.
# Three H200 calls at 46ba6fb (its GPU code is b768098's; 46ba6fb changes only benchmarks/vocab_trace.py), one
# machine start. Kernel folders (build machine):
#   SPECGEN_CODEGEN_CACHE=/tmp/cgcache bash benchmarks/build_gpu_kernels.sh sampling_test_kernels specgen_kernels verify_test_kernels kbuild-cuda-edge
#   python3 -m specgen build --target cuda --widths 4 --block-table-widths 64 --block-sizes 128 --draft-dtypes int32 --out build/bench_w4
#   python3 benchmarks/vocab_trace.py copy build/sampling_test_kernels build/vocab_trace
#   build/vocab_350cd30: build/sampling_test_kernels as built at 350cd30 (the A/B base)

## call 1: checks, kernel A/B, trace, sanitizers, the sampling path's GPU tests
OUT=$OUT python3 benchmarks/vocab_gpu.py check                                          # checks 50 bad 0
OUT=$OUT python3 benchmarks/vocab_ab.py time build/vocab_350cd30 build/sampling_test_kernels   # time_*.json
python3 benchmarks/vocab_ab.py report $OUT                                               # vocab_ab.md
OUT=$OUT python3 benchmarks/vocab_trace.py run build/vocab_trace 1 8 32                  # vocab_trace.{json,md}
compute-sanitizer --tool memcheck --error-exitcode 3 python3 benchmarks/vocab_gpu.py check   # san_memcheck_summary.txt
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels   # and the other variables of benchmarks/h200.sh
python3 -m pytest -m gpu -q tests/codegen/test_vocab_sample.py tests/engine/test_sampling_engine.py \
  tests/runtime/test_sampling_weights.py                                                 # tests.txt

## call 2: the step-level benches (medians of 3 runs, modes in rotated order)
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --profile-steps 0 --warmup 4 --prompt-len 1024 \
   --block-size 128 --block-table-width 64 --kernels build/bench_w4 --repeats 3"
S="--temperature 0.7 --top-p 0.9"
$B $S --acceptance 0.7 --modes compile,specgen     # bench_kernels.json
$B --acceptance 0.7 --modes specgen                # bench_greedy.json
$B $S --modes specgen                              # bench_draft_sampling.json

## call 3: racecheck (the first call's was cut at 150 s)
compute-sanitizer --tool racecheck --error-exitcode 3 python3 benchmarks/vocab_gpu.py check   # san_racecheck.txt
