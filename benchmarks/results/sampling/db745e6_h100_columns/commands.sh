# One NVIDIA H100 80GB HBM3 (driver 580.159.04; asked for as nvidia-h200), one call at db745e6. Kernels prebuilt off
# the device, the vocabulary families alone with
#   specgen build --target cuda --arch sm_90 --widths 4 --block-table-widths 64 --block-sizes 128 --draft-dtypes int32 \
#     --families spec_target_sample,spec_target_sample_dense,spec_draft_sample --out build/vocab_ab/NAME
# at 2aef745 (new3), 7d6abc1 (key), 1661c09 (new4) and db745e6 (new5); build/bench_prev is
# build/sampling_bench_kernels with 2aef745's vocabulary template; build/sampling_bench_kernels and
# build/sampling_test_kernels are db745e6's (benchmarks/build_gpu_kernels.sh; benchmarks/h200.sh's header).
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
python3 -m pytest -m gpu -rA tests/codegen/test_vocab_sample.py                                    # gpu_tests_vocab.txt
python3 -m pytest -m gpu -rA tests/engine/test_sampling_engine.py tests/engine/test_draft_vocab_engine.py \
  tests/engine/test_draft_sampling.py                                                              # gpu_tests_sampling.txt
mkdir -p /tmp/mc; OUT=/tmp/mc VOCAB_LIB=build/sampling_test_kernels compute-sanitizer --tool memcheck \
  --report-api-errors no python3 benchmarks/vocab_gpu.py check                                     # sanitizer_vocab.txt
for s in 0.5 4; do
  OUT=ab_s$s VOCAB_AB_SPREAD=$s python3 benchmarks/vocab_ab.py time build/vocab_ab/new3 build/vocab_ab/key \
    build/vocab_ab/new4 build/vocab_ab/new5
  python3 benchmarks/vocab_ab.py report ab_s$s > ab_s$s.md; done
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3"
T="--temperature 0.7 --top-p 0.9"
$B --kernels build/sampling_bench_kernels                            # engine/bench_greedy.json
$B $T --kernels build/sampling_bench_kernels                         # engine/bench_sampled_new.json
$B $T --kernels build/bench_prev                                     # engine/bench_sampled_prev.json
$B $T --kernels build/sampling_bench_kernels                         # engine/bench_sampled_new2.json
VOCAB_AB_SPREAD=4 ncu --set full --import-source yes -k regex:spec_target_sample --launch-skip 2 --launch-count 1 \
  -o prof python3 benchmarks/vocab_ab.py ncu build/sampling_bench_kernels 32                      # B = 32, C = 1
ncu --import prof.ncu-rep --page source --csv --print-source sass | gzip > ncu_source_sass.csv.gz
ncu --import prof.ncu-rep --page details --csv > ncu_details.csv
python3 ../94815d8_h100_candidates/ncu_phases.py ncu_source_sass.csv.gz 128 151936 > ncu_phases.txt
# a third call: stall reasons of spec_draft_sample at B = 32, C = 4 (the engine's C), 7d6abc1's build against db745e6's
M='gpu__time_duration.sum,smsp__inst_executed.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
for d in key new5; do VOCAB_AB_SPREAD=4 ncu --metrics "$M" -k regex:spec_draft_sample --launch-skip 2 --launch-count 1 \
  --csv --page raw python3 benchmarks/vocab_ab.py ncu build/vocab_ab/$d 32 spec_draft_sample > raw_$d.csv; done
