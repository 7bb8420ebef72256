"""Property tests: random boundary graphs through the default pipeline."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgen.passes import bubble_us, run_pipeline
from specgen.passes.ir import HOST, BoundaryGraph, Op, OpKind, Placement, Value
from specgen.passes.ir import semantics as sem
from specgen.passes.ir.analysis import Ordering, between
from specgen.passes.ir.interpreter import outputs_equal
from specgen.passes.ir.ordering import order_with_events
from specgen.passes.ir.verify import verify

SHAPE = (1, 4)
DEVICE_STREAMS = ["draft", "target", "aux"]
FAMILIES = [None, None, "spec_verify_metadata_update", "context_kv_update"]


def _mix(*xs):
    return sem.mix(*xs, rows=1, cols=4)


@st.composite
def boundary_graphs(draw):
    values = {
        "seed": Value("seed", Placement.DEVICE, SHAPE, persistent=True, is_input=True, init="token"),
        "host_in": Value("host_in", Placement.HOST, SHAPE, is_input=True, init="token"),
        "tok": Value("tok", Placement.DEVICE, SHAPE, persistent=True),
    }
    ops = [Op("final_draft", OpKind.DEVICE_KERNEL, "draft", ("seed",), ("tok",), _mix, 300.0)]
    device = {"tok": "draft", "seed": "draft"}  # device value -> stream of its producer
    host = ["host_in"]
    outputs = []
    n = 0

    def fresh(prefix):
        nonlocal n
        n += 1
        return f"{prefix}{n}"

    for _ in range(draw(st.integers(2, 10))):
        choice = draw(st.sampled_from(["kernel", "roundtrip", "host_prep", "task"]))
        if choice == "kernel":
            srcs = draw(st.lists(st.sampled_from(sorted(device)), min_size=1, max_size=2, unique=True))
            out = fresh("d")
            stream = draw(st.sampled_from(DEVICE_STREAMS))
            values[out] = Value(out, Placement.DEVICE, SHAPE, persistent=draw(st.booleans()))
            ops.append(Op(fresh("k"), OpKind.DEVICE_KERNEL, stream, tuple(srcs), (out,), _mix,
                          attrs={"family": draw(st.sampled_from(FAMILIES))}))
            device[out] = stream
        elif choice == "roundtrip":  # D2H, sync, host compute, H2D: the pattern of the reference documents
            src = draw(st.sampled_from(sorted(device)))
            pinned, staged, dst = fresh("p"), fresh("s"), fresh("d")
            values[pinned] = Value(pinned, Placement.PINNED, SHAPE)
            values[staged] = Value(staged, Placement.PINNED, SHAPE)
            values[dst] = Value(dst, Placement.DEVICE, SHAPE, persistent=True)
            extra = draw(st.lists(st.sampled_from(host), max_size=1))
            ops += [Op(fresh("d2h"), OpKind.D2H, device[src], (src,), (pinned,)),
                    Op(fresh("sync"), OpKind.HOST_SYNC, HOST, (pinned,)),
                    Op(fresh("host"), OpKind.HOST_COMPUTE, HOST, (pinned, *extra), (staged,), _mix,
                       attrs={"family": draw(st.sampled_from(FAMILIES))}),
                    Op(fresh("h2d"), OpKind.H2D, draw(st.sampled_from(DEVICE_STREAMS)), (staged,), (dst,))]
            host.append(pinned)
            device[dst] = ops[-1].stream
        elif choice == "host_prep":  # token-independent host work
            staged, dst = fresh("s"), fresh("d")
            values[staged] = Value(staged, Placement.PINNED, SHAPE)
            values[dst] = Value(dst, Placement.DEVICE, SHAPE, persistent=True)
            ops += [Op(fresh("host"), OpKind.HOST_COMPUTE, HOST, ("host_in",), (staged,), _mix),
                    Op(fresh("h2d"), OpKind.H2D, "target", (staged,), (dst,))]
            device[dst] = "target"
        else:
            out = fresh("g")
            values[out] = Value(out, Placement.PINNED, SHAPE, persistent=True)
            ops.append(Op(fresh("task"), OpKind.GRAPH_TASK_UPDATE, HOST, ("host_in",), (out,), _mix))
            host.append(out)
    if draw(st.booleans()) and len(host) > 1:  # a host-only consumer of some device result
        outputs.append("committed")
        values["committed"] = Value("committed", Placement.HOST, SHAPE)
        ops.append(Op("host_commit", OpKind.HOST_COMPUTE, HOST, (host[-1],), ("committed",), _mix))
    graph_in = draw(st.lists(st.sampled_from(sorted(device) + [h for h in host if values[h].placement is
                                                                   Placement.PINNED]), min_size=1, max_size=4,
                             unique=True))
    values["target_out"] = Value("target_out", Placement.DEVICE, SHAPE, persistent=True)
    ops.append(Op("replay", OpKind.GRAPH_REPLAY, "target", tuple(graph_in), ("target_out",), _mix, 2000.0,
                  {"graph_ops": ("target_forward",)}))
    outputs += ["target_out"] + [v for v in device if values[v].persistent]
    g = BoundaryGraph("random", tuple(ops), values, "final_draft", "replay", tuple(outputs),
                      {"width": 4, "block_table_width": 8, "block_size": 16, "batch": 1}, ("tok",))
    return order_with_events(g)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boundary_graphs(), st.integers(0, 2**16))
def test_pipeline_properties(before, seed):
    verify(before)
    after, _ = run_pipeline(before)  # verifies after every pass
    assert outputs_equal(before, after, seed) == []
    assert bubble_us(after) <= bubble_us(before) + 1e-6
    ordering = Ordering(after)
    kinds = {o.name: o for o in after.ops}
    in_bubble = between(after, ordering)
    for name in in_bubble:
        o = kinds[name]
        if o.kind is OpKind.HOST_SYNC:
            idx = after.index(name)
            needed = [x for x in after.ops[idx + 1:] if x.kind.on_host and set(o.reads) & set(x.reads)]
            assert needed, f"sync {name} left in the bubble with no host consumer"
    again, _ = run_pipeline(after)
    assert again.ops == after.ops
