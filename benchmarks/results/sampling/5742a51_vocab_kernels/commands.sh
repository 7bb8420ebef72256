set -x
python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/pip.txt 2>&1
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_CUDA_DEFAULT_KERNELS=build/specgen_kernels
export SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels
export SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
export SPECGEN_TEST_CUDA_FUZZ_KERNELS=build/specgen_kernels:build/kbuild-cuda-edge SPECGEN_FUZZ_EXAMPLES=20
cp .snap/commit.txt $OUT/
timeout 150 python3 -m pytest -m gpu -q -rfE --tb=long -p no:cacheprovider tests/codegen/test_vocab_sample.py \
  tests/engine/test_sampling_engine.py tests/runtime/test_sampling_weights.py tests/runtime/test_sampled_runtime.py \
  tests/engine/serving/test_loop_sampled.py > $OUT/gpu_tests.txt 2>&1
tail -3 $OUT/gpu_tests.txt
timeout 80 python3 .snap/vocab_gpu.py all > /tmp/vocab_timing.txt 2>&1; tail -2 /tmp/vocab_timing.txt
mkdir -p /tmp/rc; OUT=/tmp/rc timeout 45 compute-sanitizer --tool racecheck python3 .snap/vocab_gpu.py check > /tmp/racecheck.txt 2>&1
grep "SUMMARY\|checks" /tmp/racecheck.txt | tee $OUT/racecheck_summary.txt; grep -m3 -A3 hazard /tmp/racecheck.txt >> $OUT/racecheck_summary.txt
B="specgen bench --model qwen3-0.6b --temperature 0.7 --top-p 0.9 --depth 3 --batch 1,8,32 --steps 24 --profile-steps 0 --warmup 4 --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 64 --kernels build/specgen_kernels"
timeout 100 $B --modes compile,specgen --out /tmp/b_kernels > /tmp/bench_kernels.log 2>&1; cp /tmp/b_kernels/bench.json $OUT/bench_kernels.json; echo "bench kernels $?"
SPECGEN_VOCAB_KERNELS=0 timeout 70 $B --modes specgen --out /tmp/b_torch > /tmp/bench_torch.log 2>&1; cp /tmp/b_torch/bench.json $OUT/bench_torch.json; echo "bench torch $?"
G="${B/--temperature 0.7 --top-p 0.9 /}"
timeout 70 $G --modes specgen --out /tmp/b_greedy > /tmp/bench_greedy.log 2>&1; cp /tmp/b_greedy/bench.json $OUT/bench_greedy.json; echo "bench greedy $?"
tail -4 /tmp/bench_kernels.log /tmp/bench_torch.log /tmp/bench_greedy.log
python3 -m pip install -q --no-deps --no-build-isolation -e . > /tmp/pip.txt 2>&1
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_CUDA_DEFAULT_KERNELS=build/specgen_kernels
export SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels
export SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
export SPECGEN_TEST_CUDA_FUZZ_KERNELS=build/specgen_kernels:build/kbuild-cuda-edge SPECGEN_FUZZ_EXAMPLES=20
cp .snap/commit.txt $OUT/
mkdir -p /tmp/rc /tmp/mc
(OUT=/tmp/rc timeout 110 compute-sanitizer --tool racecheck --racecheck-report all python3 .snap/vocab_gpu.py check > /tmp/racecheck.txt 2>&1; \
 grep "SUMMARY\|checks" /tmp/racecheck.txt > $OUT/sanitizers.txt; grep -m4 -A3 "hazard" /tmp/racecheck.txt >> $OUT/sanitizers.txt)
(OUT=/tmp/mc timeout 70 compute-sanitizer --tool memcheck --report-api-errors no python3 .snap/vocab_gpu.py check > /tmp/memcheck.txt 2>&1; \
 grep "SUMMARY\|checks" /tmp/memcheck.txt >> $OUT/sanitizers.txt; grep -m4 -A3 "Invalid" /tmp/memcheck.txt >> $OUT/sanitizers.txt)
cat $OUT/sanitizers.txt
SPECGEN_FAILURES_TO=$OUT/gpu_failures.txt timeout 330 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/ > $OUT/gpu_tests_all.txt 2>&1
tail -5 $OUT/gpu_tests_all.txt
