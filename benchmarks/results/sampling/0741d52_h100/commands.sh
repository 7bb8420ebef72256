# one call on an NVIDIA H100 80GB HBM3 at 0741d52 (kernels prebuilt off the device: build/bench_w4); each
# bench wrote its folder beside the others
#   python3 -m specgen build --target cuda --arch sm_90 --widths 4 --block-table-widths 64 --block-sizes 128 \
#       --draft-dtypes int32 --out build/bench_w4
SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels \
  python3 -m pytest -m gpu -rA -s tests/models/test_skinny_lm_head.py tests/engine/test_sampling_engine.py  # gpu_tests.txt
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --kernels build/bench_w4 --modes specgen --acceptance 0.7"
T="--temperature 0.7 --top-p 0.9"
$B --profile-steps 0 --repeats 3 --out greedy                               # bench_greedy.json
$B $T --profile-steps 0 --repeats 3 --out sampled                           # bench_sampled_onehot.json
SPECGEN_LOGITS_OUT=0 $B $T --profile-steps 0 --repeats 3 --out sampled_copy # bench_sampled_copy.json
$B $T --profile-steps 8 --steps 12 --out sampled_prof                       # sampled_prof/ (breakdown, traces)
