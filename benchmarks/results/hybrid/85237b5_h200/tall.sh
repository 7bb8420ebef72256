#!/usr/bin/env bash
# call 4 (same machine): skinny_gemm.TUNED_TALL on the H200 (SPECGEN_SKINNY_TALL=0 gives 17-32 rows back to cuBLAS),
# then the tall sweep of the model's shapes at 32 rows
O=$OUT; cp .snap/s/commit.txt $O/
for tall in 0 1; do
  SPECGEN_SKINNY_TALL=$tall timeout 100 specgen bench --model qwen3.5-2b --depth 3 --batch 8,32 --steps 32 --profile-steps 0 \
    --warmup 5 --repeats 3 --modes baseline,specgen --acceptance 0.7 --prompt-len 1024 --block-size 128 \
    --block-table-width 16 --kernels build/hybrid_bench_kernels --out /tmp/t$tall > $O/bench_tall$tall.log 2>&1
  mkdir -p $O/tall$tall; cp /tmp/t$tall/bench.json $O/tall$tall/
done
timeout 170 python3 benchmarks/skinny_gemm_sweep.py --model qwen3.5-2b --tall --rows 32 --out $O/tall_sweep_h200.json \
  > $O/tall_sweep_h200.log 2>&1
