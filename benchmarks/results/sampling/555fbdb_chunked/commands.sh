# 555fbdb, one H200 call each: call 1 (GPU tests, kernel checks, memcheck, benches), call 2 (kernel timings, U = 8 and U = 4)
# the build/ folders, made on the build machine first:
#   SPECGEN_CODEGEN_CACHE=/tmp/cgcache bash benchmarks/build_gpu_kernels.sh sampling_test_kernels
#   python3 -m specgen build --target cuda --widths 4 --block-table-widths 64 --block-sizes 128 --draft-dtypes int32 --out build/bench_w4
#   (U = 4: the template's {% set U = 8 %} as 4, then) python3 -m specgen build --target cuda --widths 4 --block-table-widths 8 --block-sizes 16 --draft-dtypes int32 --boundary verify-to-draft-sampled --families spec_target_sample,spec_target_sample_dense,spec_draft_sample --out build/u4_vocab
# .snap/vocab_gpu.py is vocab_gpu.py in this folder

## call 1
# the final commit: vocabulary-pass checks and timings, the sampling GPU tests, memcheck, the step-level benches
set -x
python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/pip.txt 2>&1; tail -2 /tmp/pip.txt
cp .snap/commit.txt $OUT/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/gpu.txt
export VOCAB_LIB=build/sampling_test_kernels
OUT=$OUT timeout 200 python3 .snap/vocab_gpu.py all > $OUT/vocab_all.txt 2>&1; echo "all rc $?"; grep checks $OUT/vocab_all.txt
mkdir -p /tmp/mc; OUT=/tmp/mc timeout 90 compute-sanitizer --tool memcheck --report-api-errors no python3 .snap/vocab_gpu.py check > /tmp/memcheck.txt 2>&1
grep "SUMMARY\|checks" /tmp/memcheck.txt > $OUT/sanitizers.txt; grep -m4 -A3 "Invalid" /tmp/memcheck.txt >> $OUT/sanitizers.txt; cat $OUT/sanitizers.txt
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_FAILURES_TO=$OUT/gpu_failures.txt
timeout 150 python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/codegen/test_vocab_sample.py \
  tests/codegen/test_block_chunks.py tests/codegen/test_width_free.py tests/runtime/test_loaders.py \
  tests/engine/test_sampling_engine.py tests/runtime/test_sampling_weights.py tests/runtime/test_sampled_runtime.py \
  tests/engine/serving/test_loop_sampled.py > $OUT/gpu_tests.txt 2>&1; tail -2 $OUT/gpu_tests.txt
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --profile-steps 0 --warmup 4 --prompt-len 1024 --block-size 128 --block-table-width 64 --kernels build/bench_w4"
S="--temperature 0.7 --top-p 0.9"
timeout 130 $B $S --acceptance 0.7 --modes baseline,compile,specgen --out /tmp/b_kernels > /tmp/b1.log 2>&1; echo "kernels $?"; cp /tmp/b_kernels/bench.json $OUT/bench_kernels.json
timeout 50 $B --acceptance 0.7 --modes specgen --out /tmp/b_greedy > /tmp/b3.log 2>&1; echo "greedy $?"; cp /tmp/b_greedy/bench.json $OUT/bench_greedy.json
timeout 50 $B $S --modes specgen --out /tmp/b_draft > /tmp/b4.log 2>&1; echo "drafts sample $?"; cp /tmp/b_draft/bench.json $OUT/bench_draft_sampling.json
SPECGEN_VOCAB_KERNELS=0 timeout 100 $B $S --acceptance 0.7 --modes specgen --out /tmp/b_torch > /tmp/b2.log 2>&1; echo "torch $?"; cp /tmp/b_torch/bench.json $OUT/bench_torch.json
for f in /tmp/b1.log /tmp/b3.log /tmp/b4.log /tmp/b2.log; do tail -n 5 $f; done

## call 2
# kernel-level timings of the vocabulary pass at the final commit (U = 8), and the same template with U = 4 loads per lane
set -x
python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/pip.txt 2>&1
cp .snap/commit.txt $OUT/
mkdir -p /tmp/a /tmp/b
VOCAB_LIB=build/sampling_test_kernels OUT=/tmp/a timeout 200 python3 .snap/vocab_gpu.py all > /tmp/a/log.txt 2>&1; echo "u8 $?"; grep checks /tmp/a/log.txt
cp /tmp/a/vocab_gpu.json $OUT/vocab_gpu_u8.json
VOCAB_LIB=build/u4_vocab OUT=/tmp/b timeout 200 python3 .snap/vocab_gpu.py all > /tmp/b/log.txt 2>&1; echo "u4 $?"; grep checks /tmp/b/log.txt
cp /tmp/b/vocab_gpu.json $OUT/vocab_gpu_u4.json

## call 3 (at 0c1bd75, no GPU code changed since 555fbdb): the whole GPU suite -> gpu_tests_all_0c1bd75.txt
# the other build/ folders: benchmarks/build_gpu_kernels.sh verify_test_kernels engine_test_kernels block_test_kernels kbuild-cuda-edge hybrid_test_kernels specgen_kernels
# the whole GPU suite at the final code
python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/pip.txt 2>&1
cp .snap/commit.txt $OUT/
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_CUDA_DEFAULT_KERNELS=build/specgen_kernels
export SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels
export SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
export SPECGEN_TEST_CUDA_FUZZ_KERNELS=build/specgen_kernels:build/kbuild-cuda-edge SPECGEN_FUZZ_EXAMPLES=20
SPECGEN_FAILURES_TO=$OUT/gpu_failures.txt timeout 545 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider --durations=15 tests/ > $OUT/gpu_tests_all.txt 2>&1
echo "rc $?"; tail -25 $OUT/gpu_tests_all.txt
