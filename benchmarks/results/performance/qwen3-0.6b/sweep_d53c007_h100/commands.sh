# one call on an NVIDIA H100 80GB HBM3 at d53c007 (kernels prebuilt off the device: build/specgen_kernels,
# build/sampling_test_kernels, build/bench_w4)
DEPTHS=3 STEPS=64 bash benchmarks/h200.sh OUT bench        # four_modes/ (bench.json, costs.json, traces), bench_qwen3-0.6b.log
STEPS=64 bash benchmarks/h200.sh OUT agreement             # one_mode/, agreement.md / .json
SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels python3 -m pytest -m gpu -q tests/engine/test_draft_sampling.py \
  tests/engine/test_sampling_engine.py                      # gpu_tests_sampling.txt
# then, off the device:
specgen plan --compare four_modes/bench.json --costs four_modes/costs.json --compare-json compare.json > compare.md
