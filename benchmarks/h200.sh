#!/usr/bin/env bash
# What the H200 runs: kernels come prebuilt (no TileLang there), carried in build/.
# A call takes the working tree and its carried folders up to 64 MiB together (the tracked tree is about 47 MiB):
# benchmarks/kernel_subset.py SRC DST --families ... --targets cuda cuts a folder to what the call loads.
#   specgen build --target c,cuda --out build/specgen_kernels
#   specgen build --target cuda --widths 4 --block-table-widths 8 --block-sizes 16 --out build/verify_test_kernels
#   specgen build --target c,cuda --widths 2-6 --block-table-widths 8 --block-sizes 16 --draft-dtypes int32 \
#       --boundary draft-to-verify,verify-to-draft --out build/engine_test_kernels
#   specgen build --target cuda --widths 4,5,6 --block-table-widths 32 --block-sizes 16 --draft-dtypes int32 \
#       --boundary draft-to-verify,verify-to-draft --out build/bench_kernels
#   specgen build --target c,cuda --boundary draft-to-verify,context-kv --widths 4,8,16 --block-table-widths 8 \
#       --block-sizes 16 --draft-dtypes int32 \
#       --families spec_verify_head_update,spec_verify_context_tail_update,greedy_prefix_verify,context_kv_update,\
#       prepare_next_block,spec_batch_row_remap --out build/block_test_kernels
#   specgen build --target cuda --boundary draft-to-verify,context-kv --widths 8,16 --block-table-widths 80 \
#       --block-sizes 16 --draft-dtypes int32 --out build/block_bench_kernels
#   specgen build --target cuda --widths 6 --block-table-widths 3 --block-sizes 5 --out build/kbuild-cuda-edge
#   specgen build --target c,cuda --widths 2-6,8 --block-table-widths 8 --block-sizes 16 --draft-dtypes int32 \
#       --boundary draft-to-verify-linear,verify-to-draft,context-kv --out build/hybrid_test_kernels
#   specgen build --target cuda --widths 2-16 --block-table-widths 64 --block-sizes 128 --draft-dtypes int32 \
#       --families spec_verify_head_update,spec_verify_token_update,spec_verify_metadata_update,\
#       spec_verify_attention_tiling_update --out build/head_kernels
#   specgen build --target c,cuda --widths 3,4 --block-table-widths 8 --block-sizes 16 --draft-dtypes int32 \
#       --boundary draft-to-verify,draft-to-verify-linear,verify-to-draft-sampled,context-kv-sampled \
#       --families spec_verify_head_update,spec_verify_hybrid_head_update,spec_verify_linear_state_update,\
#       spec_verify_token_update,spec_verify_metadata_update,spec_verify_attention_tiling_update,\
#       spec_rejection_verify,prepare_next_draft,context_kv_update,prepare_next_block,spec_rejection_tail_update,\
#       spec_rejection_context_tail_update,spec_verify_guard_check,spec_target_sample,spec_target_sample_dense,\
#       spec_draft_sample,spec_target_sample_tiles,spec_target_sample_dense_tiles --out build/sampling_test_kernels
# The serving loop's row remap (spec_batch_row_remap) is built beside the tails' plans (verify-to-draft, context-kv):
# specgen_kernels, engine_test_kernels, block_test_kernels, hybrid_test_kernels and kbuild-cuda-edge hold it only
# when built after it was added (commit 64e76d6); tests/engine/serving/test_loop_cuda.py and the CUDA fuzz need it
# (SPECGEN_SERVE_SOAK_REQUESTS, default 2000, sizes that file's soak).
# Stages: tests (every GPU test), tests-changed (the GPU tests of the changes since the last GPU run),
# sanitize-vocab (compute-sanitizer memcheck and racecheck over the vocabulary pass's check set), serving-tests (the serving loop's, the runtime replay's and the forwards' GPU tests,
# TESTS_LIMIT seconds at most), engine-tests (tests/models, tests/engine, tests/bench: the reference application),
# sanitize (the CUDA fuzz of every family under compute-sanitizer memcheck, racecheck, initcheck),
# block-bench (DFlash depth 15 and DSpark depth 7 drafts, three modes),
# fuzz-heads (the CUDA fuzz of the head families at W = 2..16, build/head_kernels), heads (benchmarks/head_updates.py), bench / bench-8b (`specgen bench`, four modes, Qwen3-0.6B / Qwen3-8B
# shapes, context 1024, the default build's bt64 bs128 layout; cli/bench.py over bench/harness.py),
# (DEPTHS, e.g. 3,4,5: one run and folder per depth, OUT_DIR/bench_MODEL_dD; BATCHES, MODES, STEPS and REPEATS
# (--repeats) choose the rest; bench-sampling: the same at --temperature 0.7 --top-p 0.9), host-profile (cProfile of the host's step loop), bench-mtp (the MTP head's own acceptance), forward (benchmarks/forward_speed.py: the bare verify
# forward and the draft step, torch and Triton forwards, kernels per layer).
# serve-bench (specgen serve-bench: Qwen3-0.6B shapes, MTP depth 3, rates 8/s, 48/s and all at once, a closed loop of 32).
# streams-ab (specgen alone: the step graphs with side streams against --no-side-streams, one stream; MTP depth 3,
# DFlash depth 15 and DSpark depth 7 (STREAMS="mtp 3,dflash 15,dspark 7") at B = 1, 8, 32, ROUNDS interleaved
# rounds; B = 1 traces kept),
# tail-ab (specgen alone: the block drafts in their own graph, --own-draft-graph, against at the end of the step graph;
# TAILS="dflash 15,dspark 7", ROUNDS interleaved rounds),
# mirror-ab (specgen alone, side streams: the host fields by a copy against mapped memory, --mapped-mirror; MTP depth 3
# and the block drafts, MIRRORS as STREAMS, ROUNDS interleaved rounds),
# head-ab (MTP depth 3, specgen alone: the LM heads on cuBLAS against the skinny GEMM, then the skinny heads on one
# stream with mapped host writes; ROUNDS interleaved rounds; benchmarks/lm_head_speed.py),
# guard-ab (the device guard's TPOT cost: specgen alone, depth 3, B = 1, 8, 32, PAIRS interleaved runs with and
# without --no-device-guard, then one profiled run of each at B = 1 and 8 and benchmarks/trace_diff.py over them),
# block-ab (the block drafts, specgen alone: BASE's source tree against the checkout, ROUNDS rounds),
# beside-ab (the block drafts, specgen alone, the checkout: the context rows after the tail against beside the
# forward, SPECGEN_CONTEXT_BESIDE=0 and 1 interleaved, ROUNDS rounds; B = 1 traces kept for trace_diff.py),
# agreement (specgen alone, the bench stage's settings: its kernel-level figures against the four-mode sweep's,
# benchmarks/sweep_agreement.py; run after bench, DEPTHS as there).
# vocab-ab (the vocabulary pass: benchmarks/vocab_gpu.py check of the sampling build, then vocab_ab.py time over
# VOCAB_BASE (default build/vocab_base) against build/sampling_test_kernels, the C sweep of the latter, and ncu of
# one launch at B = 1 and 32 from NCU_KERNELS, default build/sampling_test_kernels; where build/vocab_trace is carried,
# block 0's phases: benchmarks/vocab_trace.py).
# Everything a stage writes goes to OUT_DIR as it runs: give the device call's $OUT, so a run cut at the call's limit
# still returns what it wrote.
# Usage: benchmarks/h200.sh OUT_DIR [tests] [tests-changed] [sanitize-vocab] [serving-tests] [engine-tests] [sanitize] [fuzz-heads] [heads] [forward] [bench] [bench-8b]
#        [bench-sampling] [serve-bench] [attention-sweep] [prefill-speed] [host-profile]
#        [bench-mtp] [block-bench] [block-ab] [beside-ab] [streams-ab] [tail-ab] [mirror-ab] [head-ab] [guard-ab] [agreement] [vocab-ab]
#        [tiles-ab] [tiles-bench]
set -u
out=$1; shift
DEPTHS=${DEPTHS:-3}
mkdir -p "$out"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 || { cat "$out/install.log"; exit 1; }
# fla-core (the Gated DeltaNet kernels' outside reference), where its wheel travels in .whl/ (h200_hybrid.sh)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >>"$out/install.log" 2>&1 && export PYTHONPATH=/tmp/site
fi
export SPECGEN_TEST_CUDA_KERNELS=build/verify_test_kernels
export SPECGEN_TEST_CUDA_DEFAULT_KERNELS=build/specgen_kernels
export SPECGEN_TEST_ENGINE_KERNELS=build/engine_test_kernels
export SPECGEN_TEST_BLOCK_KERNELS=build/block_test_kernels
export SPECGEN_TEST_HYBRID_KERNELS=build/hybrid_test_kernels
export SPECGEN_TEST_SAMPLING_KERNELS=build/sampling_test_kernels
export SPECGEN_TEST_CUDA_FUZZ_KERNELS=build/specgen_kernels:build/kbuild-cuda-edge
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$out/gpu.txt" 2>&1
# draft_ab NAME SPECS TAG_A FLAG_A TAG_B FLAG_B: specgen alone, the checkout, arm A (bench flag FLAG_A, may be empty)
# against arm B, ROUNDS interleaved rounds (default 2), for each "draft depth" of the comma-separated SPECS: MTP at
# depth 3 on BENCH_KERNELS (default build/specgen_kernels), a block draft on build/block_bench_kernels; B = 1, 8, 32;
# B = 1 traces kept for trace_diff.py; OUT_DIR/NAME_ab_DRAFT/ab.md compares the arms
draft_ab() {
  local name=$1 ta=$3 xa=$4 tb=$5 xb=$6 spec d r tag x a specs
  local G="--model qwen3-0.6b --depth 3 --modes specgen --warmup 10 --acceptance 0.7 --prompt-len 1024 \
    --block-size 128 --block-table-width 64 --kernels ${BENCH_KERNELS:-build/specgen_kernels} --batch 1,8,32 --steps 96"
  local K="--warmup 3 --acceptance 0.7 --block-table-width 80 --kernels build/block_bench_kernels --modes specgen"
  IFS=, read -ra specs <<< "$2"
  for spec in "${specs[@]}"; do set -- $spec; d="$out/${name}_ab_$1"; mkdir -p "$d"
    for r in $(seq 1 ${ROUNDS:-2}); do for tag in "$ta" "$tb"; do x=$xa; [ "$tag" = "$tb" ] && x=$xb
      if [ "$1" = mtp ]; then a=$G; else a="--model qwen3-0.6b --draft $1 --depth $2 --batch 1,8,32 --steps 64 $K"; fi
      specgen bench $a $x --out "$d/${tag}_$r" > "$d/${tag}_$r.log" 2>&1; echo "$name $1 $tag round $r: exit $?"
    done; done
    find "$d" -name '*.json.gz' ! -name '*_b1.*' -delete
    python3 benchmarks/tree_ab.py "$d" "$ta" "$tb" | tee "$d/ab.md" | grep -E "tpot_ms|to_verify|to_draft|post_verify"
  done
}
for stage in "$@"; do
  case $stage in
    tests) SPECGEN_FAILURES_TO="$out/gpu_failures.txt" python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/ 2>&1 | tee "$out/gpu_tests.txt" | tail -40 ;;
    tests-changed)  # the GPU tests of what changed since the last GPU run (TESTS_LIMIT seconds at most): the launcher's
      # occupancy check, the one-launch guard, the context tails, the host mirror, the vocabulary pass, the bench
      SPECGEN_FAILURES_TO="$out/gpu_failures.txt" SPECGEN_SERVE_SOAK_REQUESTS=${SPECGEN_SERVE_SOAK_REQUESTS:-200} \
        timeout ${TESTS_LIMIT:-540} python3 -m pytest -m gpu -q -rfE \
        -p no:cacheprovider --durations=15 tests/runtime/test_loaders.py tests/runtime/test_device_guard.py \
        tests/codegen/test_vocab_sample.py tests/codegen/test_fuzz_cuda.py tests/runtime/test_sampling_weights.py \
        tests/engine/test_sampling_engine.py tests/engine/modes/test_block.py tests/engine/test_block_context.py \
        tests/runtime/test_verify_graph.py tests/engine/test_engine.py tests/bench/test_block_bench.py \
        tests/bench/test_bench_kernels.py tests/engine/serving/test_loop_cuda.py 2>&1 | tee "$out/gpu_tests_changed.txt" \
        | tail -8 ;;
    sanitize-vocab)
      for tool in memcheck racecheck; do  # the vocabulary pass's check set (benchmarks/vocab_gpu.py check)
        OUT="$out" timeout 300 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 3 \
          python3 benchmarks/vocab_gpu.py check \
          > "$out/sanitize_vocab_$tool.txt" 2>&1
        echo "compute-sanitizer --tool $tool on the vocabulary pass: exit $?"; grep -E "ERROR SUMMARY|checks" "$out/sanitize_vocab_$tool.txt" | tail -2
      done ;;
    serving-tests)  # what a serving change needs (over 240 s at d7a0232, cut there): the loop, the runtime's replay, the forwards
      SPECGEN_FAILURES_TO="$out/gpu_failures.txt" SPECGEN_SERVE_SOAK_REQUESTS=${SPECGEN_SERVE_SOAK_REQUESTS:-500} \
        timeout ${TESTS_LIMIT:-420} python3 -m pytest -m gpu -q -rfE -p no:cacheprovider --durations=20 \
        tests/engine/serving tests/runtime/test_verify_graph.py tests/models/test_cuda_forward.py \
        tests/engine/test_engine.py 2>&1 | tee "$out/gpu_serving_tests.txt" | tail -5 ;;
    engine-tests) python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/models tests/engine tests/bench 2>&1 \
             | tee "$out/gpu_engine_tests.txt" | tail -20 ;;
    sanitize)
      for tool in memcheck racecheck initcheck; do
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 SPECGEN_FUZZ_EXAMPLES=${SPECGEN_FUZZ_EXAMPLES:-8} \
          compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 3 python3 -m pytest -q -p no:cacheprovider \
          tests/codegen/test_fuzz_cuda.py > "$out/sanitize_$tool.txt" 2>&1
        echo "compute-sanitizer --tool $tool: exit $?"; grep -E "ERROR SUMMARY|passed|failed" "$out/sanitize_$tool.txt" | tail -3
      done ;;
    block-bench)
      for spec in "dflash 15" "dspark 7"; do set -- $spec
        specgen bench --model qwen3-0.6b --draft $1 --depth $2 --batch 1,8,32 --steps 64 --warmup 3 --acceptance 0.7 \
          --block-table-width 80 --kernels build/block_bench_kernels --out "$out/bench_$1" > "$out/bench_$1.log" 2>&1
        echo "block bench $1: exit $?"; grep -v "^frame #" "$out/bench_$1.log" | tail -14
      done ;;
    fuzz-heads) SPECGEN_FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-50} SPECGEN_TEST_CUDA_FUZZ_KERNELS=build/head_kernels \
        python3 -m pytest -q -p no:cacheprovider tests/codegen/test_fuzz_cuda.py -k "head or token or metadata or tiling" \
        2>&1 | tee "$out/fuzz_heads.txt" | tail -3 ;;
    heads) python3 benchmarks/head_updates.py --kernels build/head_kernels --out "$out/head_updates.json" 2>&1 | tail -3 ;;
    forward)
      python3 benchmarks/forward_speed.py --model qwen3-0.6b --batch 1,8,32 --kernels ${FORWARD_KERNELS:-torch,triton} \
        --out "$out/forward_qwen3-0.6b.json" \
        2>&1 | grep '^{' ;;
    bench|bench-8b|bench-sampling)  # one bench run (and folder, NAME_MODEL_dD) per depth: a cut call keeps the depths done
      model=qwen3-0.6b; steps=${STEPS:-96}; [ $stage = bench-8b ] && { model=qwen3-8b; steps=${STEPS:-48}; }
      name=bench; sampling=""; [ $stage = bench-sampling ] && { name=bench_sampling; sampling="--temperature 0.7 --top-p 0.9"; }
      for d in ${DEPTHS//,/ }; do
        [ -z "$d" ] && continue; r="$out/${name}_${model}_d$d"
        specgen bench --model $model $sampling --depth $d --batch ${BATCHES:-1,8,32} --steps $steps --profile-steps 8 \
          --warmup 10 --modes ${MODES:-baseline,compile,inductor,specgen} --acceptance 0.7 --prompt-len 1024 \
          --block-size 128 --block-table-width 64 --repeats ${REPEATS:-1} --kernels build/specgen_kernels --out "$r" \
          > "$r.log" 2>&1
        echo "$name $model depth $d: exit $?"; grep -v "^frame #" "$r.log" | grep -v "^bench: \[" | tail -24
      done ;;
    serve-bench)  # the serving workload: three request rates and a closed loop of 32, each mode (RATES, REQUESTS, MODES;
      # CLOSED="" leaves the closed loop out, CLOSED="--closed-loop N" sets another N)
      # float32 by default: in bfloat16 the serving batches pick other near-tied tokens than the acceptance
      # oracle's decode and the measured acceptance falls far below 0.7 (DTYPE=bfloat16 to measure it anyway)
      # SERVE_LIMIT: seconds at most (0: none); the sweep writes its JSON after every run, so a cut keeps those
      # (the timed runs come first; then per mode of the first load one run with timing events and one under the
      # profiler: PROFILE_STEPS=100 over four modes takes most of a 600 s call)
      # DRAFT=dflash DEPTH=15 (or dspark 7) KERNELS=build/serve_block_kernels: a block draft's sweep;
      # SERVE_ARGS: more options (e.g. --step-first), TAG: a suffix of the output names
      closed=${CLOSED---closed-loop 32}
      timeout ${SERVE_LIMIT:-0} specgen serve-bench --model qwen3-0.6b --draft ${DRAFT:-mtp} --depth ${DEPTH:-3} \
        --modes ${MODES:-baseline,specgen,inductor,compile} \
        --dtype ${DTYPE:-float32} --profile-transitions ${PROFILE_STEPS:-150} \
        --rates ${RATES:-8,48,inf} $closed --num-requests ${REQUESTS:-128} --prompt-len lognormal:256,0.8,32-1024 \
        --output-len lognormal:128,0.6,16-384 --max-batch 32 --block-size 128 --block-table-width 64 \
        --max-prefill-tokens 2048 --acceptance 0.7 --seed 0 --kernels ${KERNELS:-build/specgen_kernels} --progress-every 20 \
        ${SERVE_ARGS:-} --out "$out/serving${DRAFT:+_$DRAFT}${TAG:+_$TAG}" \
        > "$out/serve_bench${DRAFT:+_$DRAFT}${TAG:+_$TAG}.log" 2>&1
      echo "serve-bench: exit $?"
      grep -v "^frame #" "$out/serve_bench${DRAFT:+_$DRAFT}${TAG:+_$TAG}.log" | grep -v "started\|finished" | tail -16 ;;
    attention-sweep)  # the paged attention's launch choices, timed and checked against float64 (DTYPE)
      python3 benchmarks/attention_sweep.py --dtype ${DTYPE:-float32} --prefill-rows 512,2048 --verify-batch 8,32 \
        --verify-keys 1024 --block-m 16,32,64 --block-n 32,64 --warps 4,8 --stages 2 --precision ieee,tf32x3 \
        --out "$out/attention_sweep_${DTYPE:-float32}.json" 2>&1 | grep -v '^{' | tail -32 ;;
    prefill-speed)  # a serving prefill chunk's forward, eager as the loop runs it: wall, kernels, the LM head's share
      python3 benchmarks/prefill_speed.py --model qwen3-0.6b --dtype ${DTYPE:-float32} --rows 256,1024,2048 \
        --out "$out/prefill_speed.json" 2>&1 | grep -v "^frame #" | tail -24 ;;
    host-profile)  # where the host's time per step goes: specgen, depth 3, B = 1, under cProfile
      python3 -m cProfile -o "$out/host.prof" -m specgen bench --model qwen3-0.6b --depth 3 --batch 1 --steps 300 \
        --warmup 10 --profile-steps 0 --modes ${MODES:-specgen} --acceptance 0.7 --prompt-len 1024 --block-size 128 \
        --block-table-width 64 --kernels build/specgen_kernels --out "$out/host_profile" > "$out/host_profile.log" 2>&1
      echo "host-profile: exit $?"
      python3 -c "import pstats, sys; s = pstats.Stats(sys.argv[1]); s.sort_stats('cumtime').print_callees('_loop')
s.sort_stats('cumtime').print_stats('runtime/', 45); s.sort_stats('tottime').print_stats(25)" "$out/host.prof" > "$out/host_profile.txt" 2>&1
      grep -A30 "_loop" "$out/host_profile.txt" | cut -c1-170 | head -30 ;;
    block-ab)  # the block-bench's DFlash and DSpark drafts, specgen alone, BASE (a source tree, e.g. git archive main |
      # tar -x -C .snap/base, carried) against the checkout, ROUNDS rounds each (benchmarks/tree_ab.sh)
      for spec in "dflash 15" "dspark 7"; do set -- $spec
        bash benchmarks/tree_ab.sh "$out/block_ab_$1" "${BASE:?BASE: the base source tree}" ${ROUNDS:-2} \
          --model qwen3-0.6b --draft $1 --depth $2 --batch 1,8,32 --steps 64 --warmup 3 --acceptance 0.7 \
          --block-table-width 80 --kernels build/block_bench_kernels --modes specgen | grep -E "exit|tpot_ms|post_verify"
      done ;;
    beside-ab)
      for spec in "dflash 15" "dspark 7"; do set -- $spec; d="$out/beside_ab_$1"; mkdir -p "$d"
        for r in $(seq 1 ${ROUNDS:-1}); do for b in 0 1; do tag=$([ $b = 1 ] && echo on || echo off)
          SPECGEN_CONTEXT_BESIDE=$b specgen bench --model qwen3-0.6b --draft $1 --depth $2 --batch 1,8,32 --steps 64 \
            --warmup 3 --acceptance 0.7 --block-table-width 80 --kernels build/block_bench_kernels --modes specgen \
            --out "$d/${tag}_$r" > "$d/${tag}_$r.log" 2>&1; echo "beside $1 $tag round $r: exit $?"
        done; done
        find "$d" -name '*.json.gz' ! -name '*_b1.*' -delete
        python3 benchmarks/tree_ab.py "$d" off on | tee "$d/ab.md" | grep -E "tpot_ms|post_verify|projection"
      done ;;
    streams-ab)  # the step graphs with side streams (side) against one stream (one, --no-side-streams)
      draft_ab streams "${STREAMS:-mtp 3,dflash 15,dspark 7}" side "" one --no-side-streams ;;
    tail-ab)  # a block draft in its own graph (own, --own-draft-graph) against at the end of the step graph (end, the
      # default): the next draft after the verification with no graph switch between them
      draft_ab tail "${TAILS:-dflash 15,dspark 7}" own --own-draft-graph end "" ;;
    mirror-ab)  # side streams: the host fields copied on a copy stream (copy, the default) against written through
      # mapped pinned memory (mapped, --mapped-mirror)
      draft_ab mirror "${MIRRORS:-mtp 3,dflash 15,dspark 7}" copy "" mapped --mapped-mirror ;;
    head-ab)  # specgen alone, MTP depth 3 (BENCH_KERNELS), ROUNDS interleaved rounds: the LM heads on cuBLAS (cublas,
      # SPECGEN_SKINNY_LM_HEAD=0) against the skinny GEMM (skinny, 128), then the skinny heads on one stream with the
      # host fields written through mapped memory (onestream, --no-side-streams); B = 1 traces kept
      G="--model qwen3-0.6b --depth 3 --modes specgen --warmup 10 --acceptance 0.7 --prompt-len 1024 --block-size 128 \
         --block-table-width 64 --kernels ${BENCH_KERNELS:-build/specgen_kernels} --batch 1,8,32 --steps 96"
      d="$out/head_ab"; mkdir -p "$d"
      for r in $(seq 1 ${ROUNDS:-2}); do for tag in cublas skinny onestream; do
        x=""; hd=128; [ $tag = cublas ] && hd=0; [ $tag = onestream ] && x="--no-side-streams"
        SPECGEN_SKINNY_LM_HEAD=$hd specgen bench $G $x --out "$d/${tag}_$r" > "$d/${tag}_$r.log" 2>&1
        echo "head-ab $tag round $r: exit $?"
      done; done
      find "$d" -name '*.json.gz' ! -name '*_b1.*' -delete
      python3 benchmarks/tree_ab.py "$d" cublas skinny | tee "$d/skinny.md" | grep tpot_ms
      python3 benchmarks/tree_ab.py "$d" skinny onestream | tee "$d/onestream.md" | grep -E "tpot_ms|to_verify|to_draft"
      python3 benchmarks/lm_head_speed.py --out "$d/lm_head.json" | tail -7 ;;
    guard-ab)
      G="--model qwen3-0.6b --depth 3 --modes specgen --warmup 10 --acceptance 0.7 --prompt-len 1024 --block-size 128 \
         --block-table-width 64 --kernels build/specgen_kernels"
      mkdir -p "$out/guard_ab"
      for r in $(seq 1 ${PAIRS:-3}); do for g in on off; do
        x=""; [ $g = off ] && x="--no-device-guard"
        specgen bench $G --batch 1,8,32 --steps 128 --profile-steps 0 $x --out "$out/guard_ab/${g}_$r" \
          > "$out/guard_ab/${g}_$r.log" 2>&1; echo "guard $g round $r: exit $?"
      done; done
      python3 benchmarks/tree_ab.py "$out/guard_ab" on off | tee "$out/guard_ab/ab.md" | grep "tpot_ms\|step_us"
      for g in on off; do
        x=""; [ $g = off ] && x="--no-device-guard"
        specgen bench $G --batch 1,8 --steps 32 --profile-steps 12 $x --out "$out/guard_ab/trace_$g" \
          > "$out/guard_ab/trace_$g.log" 2>&1; echo "guard $g profiled: exit $?"
      done
      for b in 1 8; do  # where the step graph's kernels moved with the guard on (A) against off (B)
        t=traces/trace_specgen_d3_b$b.json.gz
        python3 benchmarks/trace_diff.py "$out/guard_ab/trace_on/$t" "$out/guard_ab/trace_off/$t" \
          --out "$out/guard_ab/trace_diff_b$b.json" > "$out/guard_ab/trace_diff_b$b.md" 2>&1
        head -2 "$out/guard_ab/trace_diff_b$b.md"
      done ;;
    agreement)
      specgen bench --model qwen3-0.6b --depth ${DEPTHS:-3} --batch 1,8,32 --steps ${STEPS:-96} --profile-steps 8 \
        --warmup 10 --modes specgen --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 64 \
        --kernels build/specgen_kernels --out "$out/bench_one_mode" > "$out/bench_one_mode.log" 2>&1
      echo "one-mode sweep: exit $?"
      for d in ${DEPTHS//,/ }; do  # the bench stage's folder of each depth against the one-mode sweep's cells
        python3 benchmarks/sweep_agreement.py "$out/bench_qwen3-0.6b_d$d/bench.json" "$out/bench_one_mode/bench.json" \
          --out "$out/agreement_d$d.json" | tee "$out/agreement_d$d.md" | tail -2
      done ;;
    vocab-ab)
      OUT="$out" python3 benchmarks/vocab_gpu.py check 2>&1 | tail -2
      OUT="$out" python3 benchmarks/vocab_ab.py time ${VOCAB_BASE:-build/vocab_base} build/sampling_test_kernels 2>&1 \
        | grep -c "'us'" | sed 's/^/vocab-ab timings: /'
      OUT="$out" python3 benchmarks/vocab_ab.py sweep build/sampling_test_kernels 2>&1 | grep -c "'us'" \
        | sed 's/^/vocab-ab sweep: /'
      python3 benchmarks/vocab_ab.py report "$out" 2>&1 | tee "$out/vocab_ab.md"
      if [ -d build/vocab_trace ]; then  # block 0's phases (benchmarks/vocab_trace.py copy of the sampling build)
        OUT="$out" python3 benchmarks/vocab_trace.py run build/vocab_trace 1 8 32 > "$out/vocab_trace.log" 2>&1
        grep cycles "$out/vocab_trace.log"
      fi
      for b in 1 32; do  # one launch of spec_target_sample under Nsight Compute (B = 1 at the engine's C, B = 32 at C = 1)
        timeout 240 ncu --set full --import-source yes -k regex:spec_target_sample --launch-skip 2 --launch-count 1 \
          -f -o "$out/ncu_vocab_b$b" python3 benchmarks/vocab_ab.py ncu ${NCU_KERNELS:-build/sampling_test_kernels} $b \
          > "$out/ncu_vocab_b$b.log" 2>&1
        ncu --import "$out/ncu_vocab_b$b.ncu-rep" --page details --csv > "$out/ncu_vocab_b$b.csv" 2>&1
        # per source line (a folder from benchmarks/lineinfo_copy.py as NCU_KERNELS maps the samples to the .cu)
        ncu --import "$out/ncu_vocab_b$b.ncu-rep" --page source --print-source cuda,sass --csv \
          > "$out/ncu_vocab_b${b}_source.csv" 2>&1
        python3 benchmarks/ncu_summary.py "$out/ncu_vocab_b$b.csv" "$out/ncu_vocab_b${b}_source.csv" \
          > "$out/ncu_vocab_b$b.md" 2>&1
        echo "ncu B = $b:"; head -12 "$out/ncu_vocab_b$b.md"
      done ;;
    tiles-ab)  # the logit tiles (spec_target_sample[_dense]_tiles, the skinny head's epilogue): their GPU tests and
      # memcheck, then the kernels with the rows given their tiles against the plain family (TILES_SPREADS)
      python3 -m pytest -m gpu -q -p no:cacheprovider tests/codegen/test_vocab_sample.py tests/models/test_skinny_lm_head.py \
        tests/engine/test_sampling_engine.py > "$out/tiles_gpu_tests.txt" 2>&1; tail -1 "$out/tiles_gpu_tests.txt"
      compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 python3 -m pytest -m gpu -q \
        -p no:cacheprovider tests/codegen/test_vocab_sample.py -k "given or early" > "$out/tiles_memcheck.txt" 2>&1
      echo "memcheck: exit $?"; grep -E "ERROR SUMMARY|passed" "$out/tiles_memcheck.txt" | tail -2
      for s in ${TILES_SPREADS:-4 1}; do
        mkdir -p "$out/tiles_ab_s$s"
        for t in 0 1; do
          OUT="$out/tiles_ab_s$s" VOCAB_AB_SPREAD=$s VOCAB_AB_TILES=$t python3 benchmarks/vocab_ab.py time \
            build/sampling_test_kernels > "$out/tiles_ab_s${s}_$t.log" 2>&1
        done
        python3 benchmarks/vocab_ab.py report "$out/tiles_ab_s$s" | tee "$out/tiles_ab_s$s.md" | grep t0.7_p0.9
      done ;;
    tiles-bench)  # the engine's greedy step, and its sampled step without the logit tiles, with them, and with them
      # but the head's skinny GEMM kept to 64 rows (B = 32's 128-row verify then cuBLAS, its tiles unset); BENCH_KERNELS:
      # --boundary draft-to-verify,verify-to-draft,verify-to-draft-sampled --widths 4 --block-table-widths 64
      # --block-sizes 128
      b="specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 24 --warmup 4 --prompt-len 1024 \
        --block-size 128 --block-table-width 64 --modes specgen --acceptance 0.7 --profile-steps 0 --repeats 3 \
        --kernels ${BENCH_KERNELS:-build/sampling_bench_kernels}"
      $b --out "$out/tiles_greedy" > "$out/tiles_greedy.log" 2>&1
      for t in 0 1 1_64; do
        rows=(); [ $t = 1_64 ] && rows=(SPECGEN_SKINNY_LM_HEAD=64)
        env SPECGEN_LOGIT_TILES=${t%_64} "${rows[@]}" $b --temperature 0.7 --top-p 0.9 --out "$out/tiles_sampled_$t" > "$out/tiles_sampled_$t.log" 2>&1
      done
      python3 - "$out" <<'PY' ;;  # what sampling adds to the greedy step in each
import json, sys
steps = lambda n: {r["batch"]: r["step_us"] for r in json.load(open(f"{sys.argv[1]}/{n}/bench.json"))["runs"]}
greedy = steps("tiles_greedy")
for t in ("0", "1", "1_64"):
    print(f"tiles {t}: sampling adds", {b: round(us - greedy[b], 1) for b, us in steps(f"tiles_sampled_{t}").items()})
PY
    bench-mtp) specgen bench --model qwen3-0.6b --depth 3 --batch 1,8,32 --steps 64 --warmup 3 \
             --modes baseline,compile,specgen --kernels build/bench_kernels --out "$out/bench_mtp" > "$out/bench_mtp.log" 2>&1; grep -v "^frame #" "$out/bench_mtp.log" | tail -20 ;;
  esac
done
