"""``bench/graph_dot.py`` reads a graph's debug dump; ``benchmarks/graph_nodes.py`` counts a real engine's nodes."""

from __future__ import annotations

import json

import pytest
from oracles.scripts import benchmark_module

from specgen.bench.graph_dot import is_chain, read_dot, summary

gn = benchmark_module("graph_nodes")

# the shape of cudaGraphDebugDotPrint's output: a cluster per graph, quoted node names, labels over several lines
DOT = """digraph dot {
subgraph cluster_1 {
label="graph_1" graph[style="dashed"];
"graph_1_node_0"[style="solid" shape="rectangle" label="0
KERNEL
void at::native::vectorized_elementwise_kernel<4, ...>"];
"graph_1_node_1"[style="solid" shape="rectangle" label="1
MEMSET
dst 0x7f00"];
"graph_1_node_2"[style="solid" shape="rectangle" label="2
WAIT_EVENT
event 0x55"];
"graph_1_node_3"[style="solid" shape="rectangle" label="3
KERNEL
nvjet_hsh_64x8_64x16_4x1_v_bz_splitK_TNT"];
"graph_1_node_0" -> "graph_1_node_1";
"graph_1_node_0" -> "graph_1_node_2";
"graph_1_node_1" -> "graph_1_node_3";
"graph_1_node_2" -> "graph_1_node_3";
}
}
"""


def test_a_dump_reads_into_its_nodes_edges_and_kinds():
    g = read_dot(DOT)
    assert dict(g.nodes(data="kind")) == {
        "graph_1_node_0": "KERNEL",
        "graph_1_node_1": "MEMSET",
        "graph_1_node_2": "WAIT_EVENT",
        "graph_1_node_3": "KERNEL",
    }
    assert not is_chain(g)  # node 0 forks, node 3 joins
    assert summary(g) == {
        "nodes": 4,
        "kinds": {"KERNEL": 2, "MEMSET": 1, "WAIT_EVENT": 1},
        "chain": False,
        "roots": 1,
        "forks": 1,
        "longest_path": 3,
    }
    chain = read_dot(DOT.replace('"graph_1_node_0" -> "graph_1_node_2";\n', "").replace(
        '"graph_1_node_1" -> "graph_1_node_3";', '"graph_1_node_1" -> "graph_1_node_2";'))  # fmt: skip
    assert is_chain(chain) and summary(chain)["longest_path"] == 4
    parted = read_dot(DOT.replace('"graph_1_node_0" -> "graph_1_node_1";\n', "").replace(
        '"graph_1_node_1" -> "graph_1_node_3";\n', ""))  # fmt: skip
    assert not is_chain(parted)  # node 1 stands apart: two pieces


def test_the_script_needs_a_cuda_device(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        gn.main(["--kernels", "k", "--out", str(tmp_path / "x.json")])


@pytest.mark.gpu
def test_cuda_graph_nodes_of_the_mtp_step(tmp_path, engine_kernels):
    """A tiny target's MTP step on CUDA: every captured graph is dumped and read; with side streams the step graph
    forks, on one stream it is a chain of nodes."""
    pytest.importorskip("torch")
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
    assert step(res["side"])["forks"] > 0 and step(res["one"])["forks"] == 0
