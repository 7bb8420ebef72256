#!/usr/bin/env bash
# call 2 (same warm machine): the hybrid bench at B = 8 with the sweep's tall table (build/tall/sweep.json from
# call 1) and without it, alternating
set -u
O=$OUT; cp .snap/s/commit.txt $O/ 2>/dev/null
test -f build/tall/sweep.json || { echo "no build/tall/sweep.json: a fresh machine"; exit 2; }
cp build/tall/sweep.json $O/
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
for run in 1 2; do
  for tall in 1 0; do
    t0=$(date +%s)
    table=; [ $tall = 1 ] && table=build/tall/sweep.json
    SPECGEN_SKINNY_TABLE=$table timeout 140 specgen bench --model qwen3.5-2b --depth 3 --batch 8 --steps 32 --profile-steps 8 \
      --warmup 5 --modes baseline,specgen --acceptance 0.7 --prompt-len 1024 --repeats 1 --block-size 128 \
      --block-table-width 16 --kernels build/hybrid_bench_kernels --out $O/bench_tall${tall}_r$run > $O/bench_tall${tall}_r$run.log 2>&1
    echo "bench tall=$tall run $run: rc=$? in $(( $(date +%s) - t0 )) s"
    grep -E "^ *3 +8 " $O/bench_tall${tall}_r$run.log | cut -c1-110
  done
done
