#!/bin/bash
# Next session's second call (same commit as next.sh; carry the same): memcheck of the chunked forms, then the
# four-mode hybrid bench.
set -u
W=/tmp/wn2; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
source benchmarks/h200_hybrid.sh $W
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu_name.txt
for args in "gdn_cases.py cuda float32 odd chunked" "gdn_cases.py cuda float32 odd wy" "gdn_cases.py cuda bfloat16 real wy" "gdn_chunked_cases.py cuda"; do
  f=$W/sanitize_$(echo $args | tr ' .' '__').txt
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
    python3 tests/models/$args > $f 2>&1
  echo "memcheck $args: exit $?"; grep -E "ERROR SUMMARY" $f | tail -1; pack
done
STEPS=32 TAG=qwen3.5-2b timeout 200 bash benchmarks/h200_hybrid.sh $W bench; echo "bench at $(( $(date +%s) - T0 )) s"; pack
