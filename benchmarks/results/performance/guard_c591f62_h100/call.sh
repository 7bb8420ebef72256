#!/bin/bash
# call 5: the device guard's TPOT cost at HEAD: specgen alone, MTP depth 3, B = 1, 8, 32, two interleaved pairs
# (on, off, on, off; off: --no-device-guard), the guard-ab stage's timed runs without its profiled pair
set -u
W=/tmp/wq5; rm -rf $W; mkdir -p $W/guard_ab
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
bash benchmarks/h200.sh $W > /dev/null; echo "install $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu_name.txt; cat $W/gpu_name.txt
G="--model qwen3-0.6b --depth 3 --modes specgen --warmup 10 --acceptance 0.7 --prompt-len 1024 --block-size 128 \
   --block-table-width 64 --kernels build/specgen_kernels"
for r in 1 2; do for g in on off; do
  x=""; [ $g = off ] && x="--no-device-guard"
  [ $(( $(date +%s) - T0 )) -gt 250 ] && { echo "skip $g $r"; continue; }
  timeout 120 specgen bench $G --batch 1,8,32 --steps 128 --profile-steps 0 $x --out "$W/guard_ab/${g}_$r" \
    > "$W/guard_ab/${g}_$r.log" 2>&1; echo "guard $g round $r: exit $? at $(( $(date +%s) - T0 )) s"; pack
done; done
python3 benchmarks/tree_ab.py "$W/guard_ab" on off | tee "$W/guard_ab/ab.md" | grep "tpot_ms\|step_us"
find $W -name '*.png' -delete; pack
echo "total $(( $(date +%s) - T0 )) s"
