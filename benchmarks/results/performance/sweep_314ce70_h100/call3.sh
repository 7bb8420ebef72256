#!/bin/bash
# call 3: Qwen3-8B depth 3 four modes, then the block drafts (DFlash 15, DSpark 7; three modes); then depth 4 if call 2 skipped it
set -u
W=/tmp/wq3; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
bash benchmarks/h200.sh $W; echo "install $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu_name.txt; cat $W/gpu_name.txt
left() { echo $(( 588 - ($(date +%s) - T0) )); }
B="--batch 1,8,32 --profile-steps 8 --warmup 10 --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 64 --kernels build/specgen_kernels"
timeout $(left) specgen bench --model qwen3-8b --depth 3 --steps 48 --modes baseline,compile,inductor,specgen $B \
  --out $W/bench_8b_d3 > $W/bench_8b_d3.log 2>&1
echo "bench_8b_d3: exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^ +3 " $W/bench_8b_d3.log; pack
for spec in "dflash 15" "dspark 7"; do set -- $spec
  [ $(left) -lt 80 ] && { echo "skip $1"; continue; }
  timeout $(left) specgen bench --model qwen3-0.6b --draft $1 --depth $2 --batch 1,8,32 --steps 64 --warmup 3 --acceptance 0.7 \
    --block-table-width 80 --kernels build/block_bench_kernels --out $W/bench_$1 > $W/bench_$1.log 2>&1
  echo "bench_$1: exit $? at $(( $(date +%s) - T0 )) s"; grep -E "^ +$2 " $W/bench_$1.log; pack
done
if [ "${D4:-0}" = 1 ] && [ $(left) -gt 120 ]; then
  timeout $(left) specgen bench --model qwen3-0.6b --depth 4 --steps 64 --modes baseline,compile,inductor,specgen $B \
    --out $W/bench_d4 > $W/bench_d4.log 2>&1; echo "bench_d4: exit $? at $(( $(date +%s) - T0 )) s"; pack
fi
find $W -name '*.json.gz' -size +3M -delete; pack
echo "total $(( $(date +%s) - T0 )) s"
