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
# Usage: benchmarks/tp_h200.sh OUT_DIR [tp-tests] [tp-check] [tp-bench1] [tp-bench2]
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
  esac
done
