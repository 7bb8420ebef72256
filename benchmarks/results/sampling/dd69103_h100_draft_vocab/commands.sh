#!/usr/bin/env bash
# call D (warm machine): the sampled A/B (Qwen3-0.6B shapes) and the block drafts' A/B (qwen3.5-2b) again, every
# run's bench.json, costs.json and log packed into one archive
set -u
O=$OUT; R=/tmp/runsD; mkdir -p $R; cp .snap/s/commit.txt $R/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt 2>&1
python3 -c "import specgen" 2>/dev/null || source benchmarks/h200_hybrid.sh $O
for dv in 0 32768; do
  opt=; [ $dv != 0 ] && opt="--draft-vocab $dv"
  timeout 100 specgen bench --model qwen3-0.6b --temperature 0.7 --top-p 0.9 --depth 3 --batch 1,8,32 --steps 32 \
    --profile-steps 8 --warmup 5 --repeats 3 --modes specgen --prompt-len 1024 --block-size 128 --block-table-width 64 \
    --kernels build/sampling_bench_kernels $opt --out $R/sampled_dv$dv > $R/sampled_dv$dv.log 2>&1
  echo "sampled dv=$dv rc=$?"; grep -E "^ *3 +(1|8|32) " $R/sampled_dv$dv.log | cut -c1-140
done
tar czf $O/runs.tgz --exclude=traces --exclude="*.png" -C /tmp runsD
for kd in "dflash 15" "dspark 7"; do
  set -- $kd
  for dv in 0 32768; do
    opt=; [ $dv != 0 ] && opt="--draft-vocab $dv"
    timeout 100 specgen bench --model qwen3.5-2b --draft $1 --depth $2 --batch 1,8,32 --steps 24 --profile-steps 6 \
      --warmup 4 --modes baseline,specgen --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 16 \
      --kernels build/hybrid_block_bench_kernels $opt --out $R/${1}_dv$dv > $R/${1}_dv$dv.log 2>&1
    echo "$1 dv=$dv rc=$?"
    tar czf $O/runs.tgz --exclude=traces --exclude="*.png" -C /tmp runsD
  done
done
