#!/bin/bash
set -u
W=/tmp/w3; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu.txt
left() { echo $(( 590 - ($(date +%s) - T0) )); }
B="--profile-steps 8 --warmup 10 --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 64 --kernels build/specgen_kernels"
for d in 4 5; do
  timeout $(left) specgen bench --model qwen3-0.6b --depth $d --batch 1,8,32 --steps 64 --modes baseline,compile,inductor,specgen $B \
    --out $W/bench_d$d > $W/bench_d$d.log 2>&1
  echo "bench d$d: exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^ +$d " $W/bench_d$d.log; pack
done
timeout $(left) specgen bench --model qwen3-8b --depth 3 --batch 1,8,32 --steps 48 --modes baseline,compile,inductor,specgen $B \
  --out $W/bench_8b_d3 > $W/bench_8b_d3.log 2>&1
echo "bench 8b: exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^ +3 " $W/bench_8b_d3.log; pack
find $W -name '*.json.gz' -size +3M -delete; pack
echo "total $(( $(date +%s) - T0 )) s"
