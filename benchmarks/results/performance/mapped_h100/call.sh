#!/bin/bash
# The call at 6ce3aed on one NVIDIA H100 80GB HBM3 (driver 580.159.04): bash call.sh, with build/bench_w4,
# build/engine_test_kernels, build/verify_test_kernels and build/block_test_kernels carried (built as in the README).
# The LM-head timing ran as a script of the same code as benchmarks/lm_head_speed.py, added after the call.
# the short call: the mapped mirror's and the skinny head's GPU tests, the one-stream MTP step's nodes, the TPOT A/B
set -u
W=/tmp/w; mkdir -p $W
pack() { tar czf $OUT/results.tgz -C $W . ; }
cat .snap/s/commit.txt > $OUT/commit.txt
python3 -m pip install -q --no-deps --no-build-isolation -e . > $W/install.log 2>&1 || { tail -5 $W/install.log; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $W/gpu.txt; cat $W/gpu.txt
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels \
  SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels
T0=$(date +%s)
timeout 100 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider tests/runtime/test_host_mirror_mapped.py \
  tests/bench/test_graph_nodes.py tests/models/test_skinny_lm_head.py tests/runtime/test_device_guard_trips.py \
  "tests/engine/test_one_stream.py::test_cuda_one_stream_mtp_lossless" > $W/gpu_tests.txt 2>&1
tail -4 $W/gpu_tests.txt; cp $W/gpu_tests.txt $OUT/gpu_tests.txt; echo "tests $(( $(date +%s) - T0 )) s"; pack
SPECGEN_SKINNY_LM_HEAD=128 timeout 60 python3 benchmarks/graph_nodes.py --model qwen3-0.6b --draft mtp --depth 3 \
  --batch 1 --kernels build/bench_w4 --no-side-streams --out $W/nodes.json --dots $W/dots > $W/nodes.txt 2>&1
echo "nodes: exit $?"; grep -o '"nodes": [0-9]*, "kinds": {[^}]*}, "chain": [a-z]*' $W/nodes.txt; pack
G="--model qwen3-0.6b --depth 3 --modes specgen --warmup 10 --acceptance 0.7 --prompt-len 1024 --block-size 128 \
   --block-table-width 64 --kernels build/bench_w4 --batch 1,8,32 --steps 96"
mkdir -p $W/ab
for tag in side onehead; do
  x=""; hd=0; [ $tag = onehead ] && { x="--no-side-streams"; hd=128; }
  T1=$(date +%s)
  SPECGEN_SKINNY_LM_HEAD=$hd timeout 120 specgen bench $G $x --out $W/ab/${tag}_1 > $W/ab/${tag}_1.log 2>&1
  echo "ab $tag: exit $? $(( $(date +%s) - T1 )) s"; pack
done
find $W/ab -name '*.json.gz' ! -name '*_b1.*' -delete
python3 benchmarks/tree_ab.py $W/ab side onehead | tee $W/ab/onehead.md | grep -E "tpot_ms|to_verify|to_draft"
timeout 40 python3 benchmarks/lm_head_speed.py --out $W/lm_head.json > $W/lm_head.txt 2>&1; echo "lm head: exit $?"; tail -8 $W/lm_head.txt
pack; echo "total $(( $(date +%s) - T0 )) s"
