#!/usr/bin/env bash
# call 2 (the warm machine of call 1): the same bench with the whole vocabulary (the README's hybrid table)
set -u
O=$OUT; cp .snap/s/commit.txt $O/ 2>/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader > $O/gpu.txt 2>&1
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
t0=$(date +%s)
timeout 420 specgen bench --model qwen3.5-2b --depth 3 --batch 1,8,32 --steps 32 --profile-steps 8 --warmup 5 \
  --modes baseline,compile,inductor,specgen --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 16 \
  --kernels build/hybrid_bench_kernels --out /tmp/whole > $O/bench_whole.log 2>&1
echo "bench whole: rc=$? in $(( $(date +%s) - t0 )) s"
mkdir -p $O/bench_whole; cp /tmp/whole/*.json /tmp/whole/*.png $O/bench_whole/ 2>/dev/null
grep -E "^bench: \[" $O/bench_whole.log | grep -v profiled | cut -c1-120
grep -v "^frame #" $O/bench_whole.log | grep -v "^bench: \[" | grep -E "^ +3 " | cut -c1-200
