#!/bin/bash
# call 4: on one machine, the four-mode sweep at depths 3 and 5 and the one-mode (specgen) sweep of the same
# settings; benchmarks/sweep_agreement.py per depth (issue 25: within 1 us per cell)
set -u
W=/tmp/wq4; rm -rf $W; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cp .snap/s/commit.txt $W/commit.txt
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $W/gpu_name.txt; cat $W/gpu_name.txt
DEPTHS=3,5 STEPS=64 timeout 420 bash benchmarks/h200.sh $W bench > $W/bench.log 2>&1; echo "bench exit $? at $(( $(date +%s) - T0 )) s"; pack
DEPTHS=3,5 STEPS=64 timeout $(( 585 - ($(date +%s) - T0) )) bash benchmarks/h200.sh $W agreement > $W/agreement.log 2>&1
echo "agreement exit $? at $(( $(date +%s) - T0 )) s"; cat $W/agreement.log | tail -8
find $W -name 'trace_baseline*' -delete; find $W -name '*.json.gz' -size +3M -delete; pack
for d in 3 5; do cat $W/agreement_d$d.md 2>/dev/null | tail -30; done
echo "total $(( $(date +%s) - T0 )) s"
