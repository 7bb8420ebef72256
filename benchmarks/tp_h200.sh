#!/usr/bin/env bash
# Tensor parallelism on two H200s (kind nvidia-h200-x2).  Kernels come prebuilt, as for h200.sh:
#   specgen build --target c,cuda --widths 2-6 --block-table-widths 8 --block-sizes 16 --draft-dtypes int32 \
#       --boundary draft-to-verify,verify-to-draft --out build/engine_test_kernels
#   specgen build --target cuda --widths 4,5,6 --block-table-widths 32 --block-sizes 16 --draft-dtypes int32 \
#       --boundary draft-to-verify,verify-to-draft --out build/bench_kernels
# Leave the machine's NCCL_NVLS_ENABLE=0 / TORCH_SYMM_MEM_DISABLE_MULTICAST=1 / NVSHMEM_DISABLE_NVLS=1 as set.
# Stages (each fits one 10-minute command; every multi-GPU command runs under a timeout):
#   tp-tests   tests/parallel/test_tp.py on the GPUs: TP2 == TP1 greedy for every mode, widths 2-6,
#              batches 1/3/8, the rank check after every step, 0 host syncs per specgen step
#   tp-check   `torchrun ... specgen bench --tp 2 --check-ranks 1 --check` on the tiny model (NCCL)
#   tp-bench1  specgen bench at Qwen3-0.6B shapes, TP1: depth 3, B = 1, 8, 32, every mode
#   tp-bench2  the same under torchrun --nproc-per-node 2 with --tp 2; then the TP1 vs TP2 table
#   The two-GPU contract (the hybrid target TP2 with the draft TP1, Qwen3-8B TP2, serving TP2), kernels from
#   benchmarks/build_gpu_kernels.sh (hybrid_test_kernels, hybrid_bench_kernels, specgen_kernels):
#   hybrid-check  qwen3.5-tiny (float32) --tp 2 --draft-tp 1 --check-ranks 1 --check: TP2 greedy == TP1, the
#                 rank check after every step, host syncs per specgen step on both ranks
#   hybrid-bench  qwen3.5-2b, MTP depth 3, B = 1, 8, 32, every mode: --tp 1, then --tp 2 --draft-tp 1; the table
#   bench-8b      the same for qwen3-8b (--tp 2 with the draft body whole)
#   serve-tp      serve-bench at Qwen3-0.6B shapes, all at once (a saturating load), every mode: --tp 1, then --tp 2
# Usage: benchmarks/tp_h200.sh OUT_DIR [tp-tests] [tp-check] [tp-bench1] [tp-bench2] [hybrid-check] [hybrid-bench]
#        [bench-8b] [serve-tp]
set -u
out=$1; shift
mkdir -p "$out"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { cat "$out/install.log"; exit 1; }
export SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
nvidia-smi topo -m >> "$out/gpu.txt" 2>&1
env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)' > "$out/env.txt"
BENCH="--model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 64 --warmup 3 --modes baseline,compile,specgen \
       --acceptance 0.7 --kernels build/bench_kernels"
for stage in "$@"; do
  case $stage in
    tp-tests)
      timeout -k 10 570 python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/parallel/test_tp.py 2>&1 \
        | tee "$out/tp_gpu_tests.txt" | tail -20 ;;
    tp-check)
      timeout -k 10 150 torchrun --nproc-per-node 2 -m specgen bench --model tiny --tp 2 --check-ranks 1 --check \
        --depth 3 --batch 1,3 --steps 8 --warmup 1 --acceptance 0.7 --dtype float32 --block-table-width 8 \
        --kernels build/engine_test_kernels --out "$out/tp2_tiny_check" > "$out/tp2_tiny_check.log" 2>&1
      echo "torchrun tiny --check-ranks 1: exit $?"; tail -12 "$out/tp2_tiny_check.log" ;;
    tp-bench1)
      timeout -k 10 570 specgen bench $BENCH --tp 1 --out "$out/bench_tp1" > "$out/bench_tp1.log" 2>&1
      echo "exit $?"; grep -v "^frame #" "$out/bench_tp1.log" | tail -16 ;;
    tp-bench2)
      timeout -k 10 540 torchrun --nproc-per-node 2 -m specgen bench $BENCH --tp 2 --out "$out/bench_tp2" \
        > "$out/bench_tp2.log" 2>&1
      echo "exit $?"; grep -v "^frame #" "$out/bench_tp2.log" | tail -16
      python3 benchmarks/tp_compare.py "$out/bench_tp1/bench.json" "$out/bench_tp2/bench.json" \
        | tee "$out/tp_compare.md" ;;
    hybrid-check)
      timeout -k 10 240 specgen bench --model qwen3.5-tiny --dtype float32 --tp 2 --draft-tp 1 --check-ranks 1 --check \
        --depth 3 --batch 1,3 --steps 16 --warmup 2 --acceptance 0.7 --block-size 16 --block-table-width 8 \
        --kernels build/hybrid_test_kernels --out "$out/hybrid_tp2_check" > "$out/hybrid_tp2_check.log" 2>&1
      echo "hybrid --tp 2 --check: exit $?"; grep -v "^frame #" "$out/hybrid_tp2_check.log" | tail -12 ;;
    hybrid-bench|bench-8b)
      if [ $stage = hybrid-bench ]; then
        m="--model qwen3.5-2b --block-table-width 16 --kernels build/hybrid_bench_kernels"; name=hybrid; steps=64
      else
        m="--model qwen3-8b --block-table-width 64 --kernels build/specgen_kernels"; name=8b; steps=48
      fi
      B="$m --depth 3 --batch 1,8,32 --steps $steps --warmup 5 --acceptance 0.7 --prompt-len 1024 --block-size 128"
      timeout -k 10 280 specgen bench $B --tp 1 --out "$out/${name}_tp1" > "$out/${name}_tp1.log" 2>&1
      echo "$name --tp 1: exit $?"
      timeout -k 10 280 specgen bench $B --tp 2 --draft-tp 1 --out "$out/${name}_tp2" > "$out/${name}_tp2.log" 2>&1
      echo "$name --tp 2: exit $?"; grep -v "^frame #" "$out/${name}_tp2.log" | tail -16
      python3 benchmarks/tp_compare.py "$out/${name}_tp1/bench.json" "$out/${name}_tp2/bench.json" \
        | tee "$out/tp_compare_${name}.md" ;;
    serve-tp)
      S="--model qwen3-0.6b --depth 3 --rates inf --num-requests 96 --prompt-len lognormal:256,0.8,32-1024 \
         --output-len lognormal:128,0.6,16-384 --max-batch 32 --block-size 128 --block-table-width 64 \
         --max-prefill-tokens 2048 --dtype float32 --acceptance 0.7 --kernels build/specgen_kernels"
      for t in 1 2; do
        timeout -k 10 280 specgen serve-bench $S --tp $t --out "$out/serve_tp$t" > "$out/serve_tp$t.log" 2>&1
        echo "serve-bench --tp $t: exit $?"; grep -v "^frame #\|still running" "$out/serve_tp$t.log" | tail -8
      done ;;
  esac
done
