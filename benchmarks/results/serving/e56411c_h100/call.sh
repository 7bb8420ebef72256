#!/bin/bash
set -u
W=/tmp/w2; mkdir -p $W
cp .snap/s/commit.txt $W/commit.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu.txt
( timeout 585 env REQUESTS=64 PROFILE_STEPS=100 RATES=48,8,inf bash benchmarks/h200.sh $W serve-bench > $W/serve.log 2>&1; echo "exit $?" >> $W/serve.log ) &
P=$!
while kill -0 $P 2>/dev/null; do sleep 20; tar czf $OUT/results.tgz -C $W . 2>/dev/null; done
find $W -name '*.json.gz' -size +3M -delete; tar czf $OUT/results.tgz -C $W .
tail -40 $W/serve.log
