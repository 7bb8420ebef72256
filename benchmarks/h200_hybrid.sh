#!/usr/bin/env bash
# The hybrid target on the H200: kernels come prebuilt (no TileLang there), carried in build/:
#   specgen build --target c,cuda --arch sm_90 --out build/specgen_kernels
#   specgen build --target c,cuda --widths 2-6,8 --block-table-widths 8 --block-sizes 16 --draft-dtypes int32 \
#       --boundary draft-to-verify-linear,verify-to-draft,context-kv --out build/hybrid_test_kernels
#   specgen build --target cuda --arch sm_90 --widths 4 --block-table-widths 16 --block-sizes 128 --draft-dtypes int32 \
#       --boundary draft-to-verify-linear,draft-to-verify,verify-to-draft --out build/hybrid_bench_kernels
# fla-core (the delta rule's outside reference) travels as a wheel in .whl/ (see shared GPU notes):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl fla-core==0.6.0
# Stages: tests (the hybrid's GPU tests: kernels against torch and fla-core, every mode and draft kind in CUDA
# graphs, the runtime cases, the 10k-replay soak), sanitize (compute-sanitizer memcheck over the Triton kernels'
# cases and the linear-state families' CUDA fuzz), speed (benchmarks/hybrid_speed.py: bare verify against bare
# decode, the head's linear-state member), sweep (benchmarks/skinny_gemm_sweep.py over the model's weight shapes),
# sweep-tall (the same shapes at 32 rows against cuBLAS: the table of skinny_gemm.TUNED_TALL),
# bench (specgen bench --model qwen3.5-2b, depth 3, four modes; TAG=name writes bench_name/ and bench_name.log;
# REPEATS=N: --repeats N, every mode's timed run N times in rotated order).
# Usage: benchmarks/h200_hybrid.sh OUT_DIR [tests] [sanitize] [speed] [sweep] [sweep-tall] [bench]
set -u
out=$1; shift
mkdir -p "$out"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { cat "$out/install.log"; exit 1; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$out/install.log" 2>&1 && export PYTHONPATH=/tmp/site
fi
export SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
export SPECGEN_TEST_CUDA_FUZZ_KERNELS=build/specgen_kernels
export PYTHONUNBUFFERED=1
for stage in "$@"; do
  case $stage in
    tests) python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/models/test_triton_gdn.py \
             tests/engine/modes/test_hybrid.py tests/runtime/test_linear_state_runtime.py 2>&1 \
             | tee "$out/gpu_tests.txt" | grep -E "passed|failed|error|soak|fla-core|gdn kernels|hybrid fast" | tail -30 ;;
    sanitize)
      for args in "float32 odd" "bfloat16 real"; do
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
          python3 tests/models/gdn_cases.py cuda $args > "$out/sanitize_gdn_${args// /_}.txt" 2>&1
        echo "memcheck gdn_cases $args: exit $?"; grep -E "ERROR SUMMARY" "$out/sanitize_gdn_${args// /_}.txt" | tail -1
      done
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
        python3 tests/models/hybrid_fast_cases.py cuda float32 > "$out/sanitize_hybrid_forward.txt" 2>&1
      echo "memcheck hybrid forward: exit $?"; grep -E "ERROR SUMMARY" "$out/sanitize_hybrid_forward.txt" | tail -1
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 SPECGEN_FUZZ_EXAMPLES=8 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
        python3 -m pytest -q -p no:cacheprovider tests/codegen/test_fuzz_cuda.py -k "linear or hybrid" \
        > "$out/sanitize_linear_families.txt" 2>&1
      echo "memcheck linear-state families: exit $?"; grep -E "ERROR SUMMARY|passed|failed" "$out/sanitize_linear_families.txt" | tail -2 ;;
    speed) python3 benchmarks/hybrid_speed.py --model qwen3.5-2b --batch 1,8,32 --width 4 --context 1024 --torch \
             --kernels build/specgen_kernels --out "$out/hybrid_speed.json" 2>&1 | tail -8 ;;
    sweep) python3 benchmarks/skinny_gemm_sweep.py --model qwen3.5-2b --out "$out/skinny_gemm_sweep.json" \
             > "$out/skinny_gemm_sweep.log" 2>&1
      echo "sweep: exit $?"; tail -12 "$out/skinny_gemm_sweep.log" ;;
    sweep-tall) python3 benchmarks/skinny_gemm_sweep.py --model qwen3.5-2b --tall --rows 32 \
             --out "$out/skinny_gemm_tall.json" > "$out/skinny_gemm_tall.log" 2>&1
      echo "sweep-tall: exit $?"; tail -12 "$out/skinny_gemm_tall.log" ;;
    bench)
      # a 16-block table (2048 positions) holds the 1024-token prompts and the steps; the MTP head's
      # attention gathers its whole table
      specgen bench --model qwen3.5-2b --depth 3 --batch ${BATCHES:-1,8,32} --steps ${STEPS:-48} --profile-steps 8 \
        --warmup 5 --modes ${MODES:-baseline,compile,inductor,specgen} --acceptance 0.7 --prompt-len 1024 --repeats ${REPEATS:-1} \
        --block-size 128 --block-table-width 16 --kernels build/hybrid_bench_kernels --out "$out/bench_${TAG:-qwen3.5-2b}" \
        > "$out/bench_${TAG:-qwen3.5-2b}.log" 2>&1
      echo "bench qwen3.5-2b: exit $?"; grep -v "^frame #" "$out/bench_${TAG:-qwen3.5-2b}.log" | grep -v "^bench: \[" | tail -24 ;;
  esac
done
