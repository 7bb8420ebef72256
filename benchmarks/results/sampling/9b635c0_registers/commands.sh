# 9b635c0: the vocabulary pass with the block's row, chunk, batch and width in registers and redux tile sums.
# The scripts: benchmarks/vocab_gpu.py, benchmarks/vocab_ab.py and benchmarks/lineinfo_copy.py (the calls ran the same
# code from a copy, before it moved there; vocab_ab.py then took its arguments as `DIR time` / `DIR`).
# Kernel folders (build machine): the codegen cache shares the vocabulary variants between them
#   SPECGEN_CODEGEN_CACHE=/tmp/cgcache bash benchmarks/build_gpu_kernels.sh sampling_test_kernels specgen_kernels kbuild-cuda-edge verify_test_kernels
#   python3 -m specgen build --target cuda --widths 4 --block-table-widths 64 --block-sizes 128 --draft-dtypes int32 --out build/bench_w4 --replace
# The A/B folders: the vocabulary families alone (--families spec_target_sample,spec_target_sample_dense,spec_draft_sample
# --boundary verify-to-draft-sampled) built at 555fbdb, 34c4d2f and 9b635c0, each copied with -lineinfo cubins (python3 benchmarks/lineinfo_copy.py SRC DST)

## call A: kernel A/B of the three commits in one call (kernel_ab_*.json), checks of 9b635c0, ncu of 9b635c0 (ncu_b32.json)
for k in prof_base prof_34c prof_opt; do python3 benchmarks/vocab_ab.py time build/$k; done
ncu --set full --import-source yes -k regex:spec_target_sample --launch-skip 2 --launch-count 1 -o OUT/prof_opt python3 benchmarks/vocab_ab.py ncu build/prof_opt

## call B: 9b635c0 against the same template with a 32 ns __nanosleep per barrier poll (barrier_backoff_ab.json), two runs each
for k in prof_opt prof_opt2 prof_opt prof_opt2; do python3 benchmarks/vocab_ab.py time build/$k; done

## call C (at 9b635c0): memcheck, the GPU tests of the sampling path, the step-level benches
OUT=/tmp/mc compute-sanitizer --tool memcheck --report-api-errors no python3 benchmarks/vocab_gpu.py check     # sanitizers.txt
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_CUDA_DEFAULT_KERNELS=build/specgen_kernels
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
export SPECGEN_TEST_CUDA_FUZZ_KERNELS=build/specgen_kernels:build/kbuild-cuda-edge SPECGEN_FUZZ_EXAMPLES=20
python3 -m pytest -m gpu -q -rfE --tb=short -p no:cacheprovider tests/codegen/test_vocab_sample.py \
  tests/codegen/test_block_chunks.py tests/codegen/test_width_free.py tests/runtime/test_loaders.py tests/codegen/test_fuzz_cuda.py \
  tests/engine/test_sampling_engine.py tests/runtime/test_sampling_weights.py tests/runtime/test_sampled_runtime.py \
  tests/engine/serving/test_loop_sampled.py                                                          # gpu_tests.txt
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --profile-steps 0 --warmup 4 --prompt-len 1024 --block-size 128 --block-table-width 64 --kernels build/bench_w4"
S="--temperature 0.7 --top-p 0.9"
$B $S --acceptance 0.7 --modes baseline,compile,specgen         # bench_kernels.json
$B --acceptance 0.7 --modes specgen                              # bench_greedy.json
$B $S --modes specgen                                            # bench_draft_sampling.json
SPECGEN_VOCAB_KERNELS=0 $B $S --acceptance 0.7 --modes specgen   # bench_torch.json

## call D (at 9b635c0, right after C on the same machine): checks and kernel timings
VOCAB_LIB=build/sampling_test_kernels OUT=$OUT python3 benchmarks/vocab_gpu.py all > $OUT/vocab_all.txt     # vocab_gpu.json
