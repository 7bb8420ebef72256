"""Property tests: random boundary graphs through the default pipeline, run in random schedules."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgen.passes import bubble_us, run_pipeline
from specgen.passes.ir import HOST, BoundaryGraph, Op, OpKind, Placement, Value
from specgen.passes.ir import op_semantics as sem
from specgen.passes.ir.analysis import Ordering, between, find_races
from specgen.passes.ir.interpreter import outputs_equal
from specgen.passes.ir.ordering import order_with_events
from specgen.passes.ir.schedule import differences, random_choice
from specgen.passes.ir.verify import verify

COLS = 4
DEVICE_STREAMS = ["draft", "target", "aux"]
FAMILIES = [None, None, "spec_verify_metadata_update", "context_kv_update"]


@st.composite
def boundary_graphs(draw):
    """A random "before" boundary: the final draft, then kernels, host round trips, host
    preparation, graph-task updates, in-place rewrites on both sides, kernels reading and writing
    pinned host buffers, and a graph replay on persistent buffers; batch 1..3."""
    B = draw(st.integers(1, 3))
    shape = (B, COLS)

    def mix(*xs):
        return sem.mix(*xs, rows=B, cols=COLS)

    values = {
        "seed": Value("seed", Placement.DEVICE, shape, persistent=True, is_input=True, init="token"),
        "host_in": Value("host_in", Placement.HOST, shape, is_input=True, init="token"),
        "tok": Value("tok", Placement.DEVICE, shape, persistent=True),
    }
    ops = [Op("final_draft", OpKind.DEVICE_KERNEL, "draft", ("seed",), ("tok",), mix, 300.0)]
    device = ["tok", "seed"]  # device values written so far
    host = ["host_in"]  # host-side values the host may read
    staged = []  # pinned values an H2D has copied: the host may rewrite them afterwards
    n = 0

    def fresh(prefix):
        nonlocal n
        n += 1
        return f"{prefix}{n}"

    def new(prefix, placement, persistent=False):
        name = fresh(prefix)
        values[name] = Value(name, placement, shape, persistent=persistent)
        return name

    family = st.sampled_from(FAMILIES)
    for _ in range(draw(st.integers(2, 10))):
        choice = draw(st.sampled_from(["kernel", "kernel", "roundtrip", "host_prep", "task", "rewrite"]))
        if choice == "kernel":
            srcs = draw(st.lists(st.sampled_from(device), min_size=1, max_size=2, unique=True))
            pinned = [h for h in host if values[h].placement is Placement.PINNED]
            srcs += draw(st.lists(st.sampled_from(pinned), max_size=1)) if pinned else []
            stream = draw(st.sampled_from(DEVICE_STREAMS))
            target = draw(st.sampled_from(["fresh", "fresh", "overwrite", "pinned"]))
            if target == "overwrite":  # an in-place update: the value is written a second time
                out = draw(st.sampled_from(device))
            elif target == "pinned":  # a zero-copy write the host reads later
                out = new("z", Placement.PINNED, persistent=draw(st.booleans()))
                host.append(out)
            else:
                out = new("d", Placement.DEVICE, persistent=draw(st.booleans()))
                device.append(out)
            ops.append(
                Op(fresh("k"), OpKind.DEVICE_KERNEL, stream, tuple(srcs), (out,), mix, attrs={"family": draw(family)})
            )
        elif choice == "roundtrip":  # D2H, sync, host compute, H2D: the round trip of docs/references.md's PRs
            src = draw(st.sampled_from(device))
            pinned, stage = new("p", Placement.PINNED), new("s", Placement.PINNED)
            dst = new("d", Placement.DEVICE, persistent=True)
            extra = draw(st.lists(st.sampled_from(host), max_size=1))
            ops += [
                Op(fresh("d2h"), OpKind.D2H, draw(st.sampled_from(DEVICE_STREAMS)), (src,), (pinned,)),
                Op(fresh("sync"), OpKind.HOST_SYNC, HOST, (pinned,)),
                Op(
                    fresh("host"),
                    OpKind.HOST_COMPUTE,
                    HOST,
                    (pinned, *extra),
                    (stage,),
                    mix,
                    attrs={"family": draw(family)},
                ),
                Op(fresh("h2d"), OpKind.H2D, draw(st.sampled_from(DEVICE_STREAMS)), (stage,), (dst,)),
            ]
            host.append(pinned)
            staged.append(stage)
            device.append(dst)
        elif choice == "host_prep":  # token-independent host work
            stage, dst = new("s", Placement.PINNED), new("d", Placement.DEVICE, persistent=True)
            ops += [
                Op(fresh("host"), OpKind.HOST_COMPUTE, HOST, ("host_in",), (stage,), mix),
                Op(fresh("h2d"), OpKind.H2D, "target", (stage,), (dst,)),
            ]
            staged.append(stage)
            device.append(dst)
        elif choice == "task":
            out = new("g", Placement.PINNED, persistent=True)
            ops.append(Op(fresh("task"), OpKind.GRAPH_TASK_UPDATE, HOST, ("host_in",), (out,), mix))
            host.append(out)
        elif staged:  # the host rewrites a staging buffer its copy already read, then copies it again
            stage = draw(st.sampled_from(staged))
            dst = new("d", Placement.DEVICE, persistent=True)
            ops += [
                Op(fresh("host"), OpKind.HOST_COMPUTE, HOST, (draw(st.sampled_from(host)),), (stage,), mix),
                Op(fresh("h2d"), OpKind.H2D, draw(st.sampled_from(DEVICE_STREAMS)), (stage,), (dst,)),
            ]
            device.append(dst)
    outputs = []
    if draw(st.booleans()) and len(host) > 1:  # a host-only consumer of some device result
        values["committed"] = Value("committed", Placement.HOST, shape)
        ops.append(Op("host_commit", OpKind.HOST_COMPUTE, HOST, (host[-1],), ("committed",), mix))
        outputs.append("committed")
    stable = [
        v for v in dict.fromkeys(device + host) if values[v].persistent and values[v].placement is not Placement.HOST
    ]
    graph_in = draw(st.lists(st.sampled_from(stable), min_size=1, max_size=4, unique=True))
    values["target_out"] = Value("target_out", Placement.DEVICE, shape, persistent=True)
    ops.append(
        Op(
            "replay",
            OpKind.GRAPH_REPLAY,
            "target",
            tuple(graph_in),
            ("target_out",),
            mix,
            2000.0,
            {"graph_ops": ("target_forward",)},
        )
    )
    outputs += ["target_out"] + [v for v in dict.fromkeys(device) if values[v].persistent]
    g = BoundaryGraph(
        "random",
        tuple(ops),
        values,
        "final_draft",
        "replay",
        tuple(outputs),
        {"width": 4, "block_table_width": 8, "block_size": 16, "batch": B},
        ("tok",),
    )
    return order_with_events(g)


SCHEDULES = 4  # schedules of each graph, before and after the pipeline


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(boundary_graphs(), st.integers(0, 2**16), st.randoms(use_true_random=False))
def test_pipeline_properties(before, seed, rng):
    verify(before)
    after, _ = run_pipeline(before)  # verifies after every pass
    assert outputs_equal(before, after, seed) == []
    for _ in range(SCHEDULES):  # race-free on both sides: every schedule the hardware allows agrees
        assert differences(before, before, random_choice(rng), seed) == []
        assert differences(before, after, random_choice(rng), seed) == []
    assert bubble_us(after) <= bubble_us(before) + 1e-6
    for name in between(after, Ordering(after)):  # a sync left in the bubble orders something
        if after.op(name).kind is OpKind.HOST_SYNC:
            assert find_races(after.with_ops([o for o in after.ops if o.name != name])), (
                f"sync {name} left in the bubble although nothing races without it"
            )
    again, _ = run_pipeline(after)
    assert again.ops == after.ops
