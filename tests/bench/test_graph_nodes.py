"""``bench/graph_dot.py`` reads a graph's debug dump; ``benchmarks/graph_nodes.py`` counts a real engine's nodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from oracles.scripts import benchmark_module

from specgen.bench.graph_dot import is_chain, read_dot, summary

gn = benchmark_module("graph_nodes")

# the shape of cudaGraphDebugDotPrint's output: a cluster per graph, quoted node names, every node's shape a
# "record", its type the first word of its label
DOT = """digraph dot {
subgraph cluster_1 {
label="graph_1" graph[style="dashed"];
"graph_1_node_0"[style="bold" shape="record" label="{KERNEL
| {ID | 0 (topoId: 3) | _ZN2at6native29vectorized_elementwise_kernel\\<\\<\\<1,128,0\\>\\>\\>}
| {priority | 0}
}"];

"graph_1_node_1"[style="solid" shape="record" label="{
MEMSET
| {{ID | node handle} | {1 (topoId: 2) | 0x000000002F9707D0}}
}"];

"graph_1_node_2"[style="solid" shape="rectangle" label="2 (topoId: 1)
EVENT_WAIT
node handle: 0x000000002F978D20
event: 0x000000002A92D120
"];

"graph_1_node_3"[style="bold" shape="record" label="{KERNEL
| {ID | 3 (topoId: 0) | nvjet_hsh_64x8_64x16_4x1_v_bz_splitK_TNT\\<\\<\\<1,128,0\\>\\>\\>}
}"];

"graph_1_node_0" -> "graph_1_node_1" [headlabel=0];
"graph_1_node_0" -> "graph_1_node_2" [headlabel=0];
"graph_1_node_1" -> "graph_1_node_3" [headlabel=0];
"graph_1_node_2" -> "graph_1_node_3" [headlabel=0];
}
}
"""
DUMPS = Path(__file__).parents[2] / "benchmarks/results/performance/one_stream_h100/call2_b03c423/dots"


def test_a_dump_reads_into_its_nodes_edges_and_kinds():
    g = read_dot(DOT)
    assert dict(g.nodes(data="kind")) == {
        "graph_1_node_0": "KERNEL",
        "graph_1_node_1": "MEMSET",
        "graph_1_node_2": "EVENT_WAIT",
        "graph_1_node_3": "KERNEL",
    }
    assert not is_chain(g)  # node 0 forks, node 3 joins
    assert summary(g) == {
        "nodes": 4,
        "kinds": {"KERNEL": 2, "MEMSET": 1, "EVENT_WAIT": 1},
        "chain": False,
        "roots": 1,
        "forks": 1,
        "joins": 1,
        "longest_path": 3,
    }
    chain = read_dot(DOT.replace('"graph_1_node_0" -> "graph_1_node_2" [headlabel=0];\n', "").replace(
        '"graph_1_node_1" -> "graph_1_node_3"', '"graph_1_node_1" -> "graph_1_node_2"'))  # fmt: skip
    assert is_chain(chain) and summary(chain)["longest_path"] == 4
    parted = read_dot(DOT.replace('"graph_1_node_0" -> "graph_1_node_1" [headlabel=0];\n', "").replace(
        '"graph_1_node_1" -> "graph_1_node_3" [headlabel=0];\n', ""))  # fmt: skip
    assert not is_chain(parted)  # node 1 stands apart: two pieces


@pytest.mark.parametrize("prologue", [False, True])
def test_the_guard_test_s_dumps_from_an_h100(prologue):
    """The four step graphs the guard-trip GPU test dumped on an H100 (b03c423): with side streams the checks'
    stream starts at the graph's root (a second root, one join) and the host mirror's wait is an EVENT_WAIT node; on
    one stream the same kernels and copy form one chain."""
    side = summary(read_dot((DUMPS / f"guard_{prologue}_True.dot").read_text()))
    one = summary(read_dot((DUMPS / f"guard_{prologue}_False.dot").read_text()))
    kernels = 13 if prologue else 10
    assert one == {"nodes": kernels + 1, "kinds": {"KERNEL": kernels, "MEMCPY": 1}, "chain": True, "roots": 1,
                   "forks": 0, "joins": 0, "longest_path": kernels + 1}  # fmt: skip
    assert side["kinds"] == {"KERNEL": kernels, "MEMCPY": 1, "EVENT_WAIT": 1}
    assert not side["chain"] and side["roots"] == 2 and side["joins"] >= 1


def test_the_script_needs_a_cuda_device(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        gn.main(["--kernels", "k", "--out", str(tmp_path / "x.json")])


@pytest.mark.gpu
def test_cuda_graph_nodes_of_the_mtp_step(tmp_path, engine_kernels, monkeypatch):
    """A tiny target's MTP step on CUDA: every captured graph is dumped and read; with side streams the step graph
    is not one chain, on one stream it is, and with the LM heads on the skinny GEMM it is kernels alone (the host
    mirror's mapped writes, the hidden rows' copy kernel: no copy, memset or event node)."""
    pytest.importorskip("torch")
    monkeypatch.setenv("SPECGEN_SKINNY_LM_HEAD", "128")
    res = {}
    for tag, extra in (("side", []), ("one", ["--no-side-streams"])):
        out = tmp_path / f"{tag}.json"
        argv = ["--model", "tiny", "--kernels", str(engine_kernels.root), "--block-size", "16"]
        argv += ["--block-table-width", "8", "--batch", "3", "--out", str(out), *extra]
        assert gn.main(argv) == 0
        res[tag] = json.loads(out.read_text())["graphs"]
    for rows in res.values():
        assert rows and all(r["nodes"] for r in rows) and any(r["kinds"].get("KERNEL", 0) > 20 for r in rows)
    step = lambda rows: max(rows, key=lambda r: r["nodes"])  # noqa: E731 the step graph: the draft, forward, tail
    assert not step(res["side"])["chain"] and step(res["one"])["chain"]
    assert set(step(res["one"])["kinds"]) == {"KERNEL"}, step(res["one"])
