#!/usr/bin/env bash
# An A/B of two source trees under one `specgen bench` command, in one machine start: the base tree (a copy of
# an earlier commit, e.g. `git archive <commit> | tar -x -C .snap/base`) and the installed checkout, run in turn
# ROUNDS times, then a table of the medians (benchmarks/tree_ab.py).
# Usage: benchmarks/tree_ab.sh OUT_DIR BASE_TREE ROUNDS specgen-bench-arguments...
#   e.g. benchmarks/tree_ab.sh $OUT .snap/base 2 --model qwen3-0.6b --depth 3 --batch 1,8,32 --modes specgen \
#        --steps 64 --warmup 10 --acceptance 0.7 --prompt-len 1024 --block-size 128 --block-table-width 64 \
#        --kernels build/specgen_kernels --profile-steps 8
# The base runs from a PYTHONPATH entry whose `specgen` is BASE_TREE (ahead of the installed checkout); both use
# the same kernel folders and the same Python packages.
set -u
out=$1 base=$2 rounds=$3; shift 3
mkdir -p "$out"
shim=$(mktemp -d)
ln -s "$(realpath "$base")" "$shim/specgen"
for r in $(seq 1 "$rounds"); do
  for tree in base new; do
    if [ $tree = base ]; then pp="$shim${PYTHONPATH:+:$PYTHONPATH}"; else pp="${PYTHONPATH:-}"; fi
    PYTHONPATH="$pp" python3 -c "import specgen, sys; print(specgen.__file__)" > "$out/${tree}_$r.which" 2>&1
    PYTHONPATH="$pp" python3 -m specgen bench "$@" --out "$out/${tree}_$r" > "$out/${tree}_$r.log" 2>&1
    echo "$tree round $r: exit $? ($(cat "$out/${tree}_$r.which"))"
  done
done
python3 benchmarks/tree_ab.py "$out" | tee "$out/ab.md"
