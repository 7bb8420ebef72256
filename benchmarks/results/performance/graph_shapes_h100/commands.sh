# One NVIDIA H100 80GB HBM3, in two calls (the script at 9aa3a53, then at 37a3d38 with chain_twice and --elems):
python3 benchmarks/graph_shapes.py --out graph_shapes_9aa3a53.json          # 300 kernels of 1024 floats
python3 benchmarks/graph_shapes.py --out graph_shapes_37a3d38.json
python3 benchmarks/graph_shapes.py --elems 1048576 --shapes chain,chain_split,chain_twice,fork_root \
  --out graph_shapes_long_37a3d38.json                                       # 300 kernels of 1M floats
