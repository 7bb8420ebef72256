# one call on an NVIDIA H100 80GB HBM3 at d53c007 (kernels prebuilt off the device: build/bench_w4)
B="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 --block-size 128 \
  --block-table-width 64 --kernels build/bench_w4 --modes specgen"
T="--temperature 0.7 --top-p 0.9"
$B --acceptance 0.7 --profile-steps 8 --out greedy_prof                  # bench_greedy_prof.json, traces_greedy_prof/
$B $T --acceptance 0.7 --profile-steps 8 --out sampled_prof              # bench_sampled_prof.json, traces_sampled_prof/
$B --acceptance 0.7 --profile-steps 0 --repeats 3 --out greedy            # bench_greedy.json
$B $T --acceptance 0.7 --profile-steps 0 --repeats 3 --out sampled_onehot # bench_sampled_onehot.json
$B $T --profile-steps 0 --repeats 3 --out draft_sample                    # bench_draft_sample.json (the MTP draft samples)
# then, off the device, for b in 1 8 32:
python benchmarks/trace_diff.py traces_greedy_prof/trace_specgen_d3_b$b.json.gz \
  traces_sampled_prof/trace_specgen_d3_b$b.json.gz --min-us 1.0 --out trace_diff_b$b.json > trace_diff_b$b.md
