#!/usr/bin/env bash
# Builds, on a machine with TileLang and nvcc, every kernel folder the H200 scripts carry in build/
# (benchmarks/h200.sh, benchmarks/h200_hybrid.sh; their headers list the same commands).
# Usage: benchmarks/build_gpu_kernels.sh [NAME ...]   (default: the folders the GPU tests and benches need)
set -eu
sg() { echo "build/$1 ..." >&2; shift; python3 -m specgen build "$@"; }
i32="--draft-dtypes int32"
all="specgen_kernels verify_test_kernels engine_test_kernels block_test_kernels kbuild-cuda-edge hybrid_test_kernels
 sampling_test_kernels hybrid_bench_kernels"
for name in ${@:-$all}; do
  case $name in
    specgen_kernels) sg $name --target c,cuda --out build/$name ;;
    verify_test_kernels) sg $name --target cuda --widths 4 --block-table-widths 8 --block-sizes 16 --out build/$name ;;
    engine_test_kernels) sg $name --target c,cuda --widths 2-6 --block-table-widths 8 --block-sizes 16 $i32 \
        --boundary draft-to-verify,verify-to-draft --out build/$name ;;
    bench_kernels) sg $name --target cuda --widths 4,5,6 --block-table-widths 32 --block-sizes 16 $i32 \
        --boundary draft-to-verify,verify-to-draft --out build/$name ;;
    block_test_kernels) sg $name --target c,cuda --boundary draft-to-verify,context-kv --widths 4,8,16 \
        --block-table-widths 8 --block-sizes 16 $i32 \
        --families spec_verify_head_update,spec_verify_context_tail_update,greedy_prefix_verify,context_kv_update,prepare_next_block,spec_batch_row_remap,spec_verify_guard_check \
        --out build/$name ;;
    block_bench_kernels) sg $name --target cuda --boundary draft-to-verify,context-kv --widths 8,16 \
        --block-table-widths 80 --block-sizes 16 $i32 --out build/$name ;;
    serve_block_kernels) sg $name --target cuda --boundary draft-to-verify,context-kv --widths 8,16 \
        --block-table-widths 64 --block-sizes 128 $i32 \
        --families spec_verify_head_update,spec_verify_context_tail_update,greedy_prefix_verify,context_kv_update,prepare_next_block,spec_batch_row_remap,spec_verify_guard_check \
        --out build/$name ;;
    kbuild-cuda-edge) sg $name --target cuda --widths 6 --block-table-widths 3 --block-sizes 5 --out build/$name ;;
    hybrid_test_kernels) sg $name --target c,cuda --widths 2-6,8 --block-table-widths 8 --block-sizes 16 $i32 \
        --boundary draft-to-verify-linear,verify-to-draft,context-kv --out build/$name ;;
    hybrid_bench_kernels) sg $name --target cuda --widths 4 --block-table-widths 16 --block-sizes 128 $i32 \
        --boundary draft-to-verify-linear,draft-to-verify,verify-to-draft --out build/$name ;;
    head_kernels) sg $name --target cuda --widths 2-16 --block-table-widths 64 --block-sizes 128 $i32 \
        --families spec_verify_head_update,spec_verify_token_update,spec_verify_metadata_update,spec_verify_attention_tiling_update \
        --out build/$name ;;
    sampling_test_kernels) sg $name --target c,cuda --widths 3,4 --block-table-widths 8 --block-sizes 16 $i32 \
        --boundary draft-to-verify,draft-to-verify-linear,verify-to-draft-sampled,context-kv-sampled \
        --families spec_verify_head_update,spec_verify_hybrid_head_update,spec_verify_linear_state_update,spec_verify_token_update,spec_verify_metadata_update,spec_verify_attention_tiling_update,spec_rejection_verify,prepare_next_draft,context_kv_update,prepare_next_block,spec_rejection_tail_update,spec_rejection_context_tail_update,spec_verify_guard_check,spec_target_sample,spec_target_sample_dense,spec_draft_sample,spec_target_sample_tiles,spec_target_sample_dense_tiles \
        --out build/$name ;;
    *) echo "unknown kernel folder: $name" >&2; exit 2 ;;
  esac
done
