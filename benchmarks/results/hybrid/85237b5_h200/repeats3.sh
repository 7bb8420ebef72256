#!/usr/bin/env bash
# call 3 (the warm machine of calls 1 and 2): three timed runs of each mode, rotated, with and without --draft-vocab
O=$OUT; cp .snap/s/commit.txt $O/
for dv in 32768 0; do
  extra=; [ $dv != 0 ] && extra="--draft-vocab $dv"
  timeout 200 specgen bench --model qwen3.5-2b --depth 3 --batch 1,8,32 --steps 32 --profile-steps 0 --warmup 5 --repeats 3 \
    --modes baseline,compile,specgen --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 16 $extra \
    --kernels build/hybrid_bench_kernels --out /tmp/r$dv > $O/bench_r3_dv$dv.log 2>&1
  mkdir -p $O/r3_dv$dv; cp /tmp/r$dv/bench.json $O/r3_dv$dv/
done
