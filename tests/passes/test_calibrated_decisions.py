"""The passes' decisions under a calibrated cost model (``PassContext.model``, ``specgen plan --costs``).

With the recorded H200 calibrations (Qwen3-0.6B shapes, ``benchmarks/results/performance/qwen3-0.6b`` and the
newer ``guard_ef74ce4``, whose file also holds the verify->draft work outside the plan) and an H100's
(``sweep_513862e_h100``: Qwen3-0.6B at depths 3-5, Qwen3-8B at depth 3; ``sweep_3cd945d_h100``, with the host
clock's host families and turnarounds), pooled and per batch,
every rewrite of the default pipeline is still taken; a constructed rewrite that the costs make
slower (the composite head split back into three launches) is refused, with the reason noted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import specgen
from specgen.passes import (
    DEFAULT_PIPELINE,
    CostModel,
    PassContext,
    PassManager,
    bubble_us,
    build_boundary,
    run_pipeline,
)
from specgen.passes.base import no_worse
from specgen.specializations.capabilities import SpeculativeVerifyCapabilities

RESULTS = Path(specgen.__file__).parent / "benchmarks/results/performance"
H200 = RESULTS / "qwen3-0.6b/costs.json"
LATEST = RESULTS / "guard_ef74ce4/costs.json"  # with the ``boundary`` figures
# an H100's calibrations at 513862e: Qwen3-0.6B at depths 3-5, Qwen3-8B at depth 3; and at 3cd945d, whose host
# families and host turnarounds the host clock timed (Qwen3-0.6B at depths 3 and 5, Qwen3-8B at depth 3)
H100 = [RESULTS / f"sweep_513862e_h100/bench_{r}/costs.json" for r in ("d3", "d4", "d5", "8b_d3", "8b_d3_b32")]
H100 += [RESULTS / f"sweep_3cd945d_h100/bench_{r}/costs.json" for r in ("d3", "d5", "8b_d3")]
# and at 314ce70 (Qwen3-0.6B at depths 3-5, Qwen3-8B at depth 3; the block drafts at the step graph's end)
H100 += [RESULTS / f"sweep_314ce70_h100/bench_{r}/costs.json" for r in ("d3", "d4", "d5", "8b_d3")]
HEAD_SPLIT = "sync-to-event,hoist,fuse,capture"  # the head as three launches: no fuse-chain


def _calibrations(path: Path = H200) -> dict[str, CostModel]:
    doc = json.loads(path.read_text())
    return {"pooled": CostModel.from_dict(doc), **{b: CostModel.from_dict(d) for b, d in doc["by_batch"].items()}}


@pytest.mark.parametrize(
    "boundary, linear", [("draft-to-verify", False), ("verify-to-draft", False), ("draft-to-verify", True)]
)
@pytest.mark.parametrize("width", [4, 5, 6])
@pytest.mark.parametrize("batch", [1, 8, 32])
def test_every_default_rewrite_is_taken_under_the_h200_calibration(boundary, linear, width, batch):
    caps = SpeculativeVerifyCapabilities(has_linear_state=linear)
    before = build_boundary(boundary, width=width, batch=batch, caps=caps)
    planned, _ = run_pipeline(before)  # the default costs' plan
    paths = (H200, LATEST, *H100)
    models = {f"{p.parent.parent.name}/{p.parent.name} {k}": m for p in paths for k, m in _calibrations(p).items()}
    assert len(models) == 25 + 3 * 4 + 4 * 4  # each file pooled and per batch (1, 8, 32; 513862e's Qwen3-8B: 32 apart)
    for name, model in models.items():
        after, ctx = run_pipeline(before, model=model)
        refused = [n for n in ctx.notes if "lengthen" in n]
        assert not refused, (name, refused)
        assert [o.name for o in after.ops] == [o.name for o in planned.ops], name
        assert [o.attrs for o in after.ops] == [o.attrs for o in planned.ops], name
        assert bubble_us(after, model) < bubble_us(before, model)


class SplitHead:
    """A constructed rewrite: the captured composite head back as its three member launches (``split``: the same
    boundary planned without ``fuse-chain``)."""

    name = "split-head"

    def __init__(self, split):
        self.split = split

    def apply(self, ctx, graph):
        return no_worse(ctx, self.name, graph, self.split)


@pytest.mark.parametrize("batch", [1, 8, 32])
def test_splitting_the_head_into_three_launches_is_refused_with_the_reason(batch):
    model = _calibrations()[str(batch)]
    before = build_boundary("draft-to-verify", width=4, batch=batch)
    fused, _ = run_pipeline(before, model=model)
    split, _ = run_pipeline(before, HEAD_SPLIT, model=model)
    replay = lambda g: next(o for o in g.ops if o.kind.value == "graph_replay")  # noqa: E731
    assert replay(fused).attr("head_ops") == 1 and replay(split).attr("head_ops") == 3
    assert [o.name for o in fused.ops] == [o.name for o in split.ops]  # only the head differs
    b1, b3 = bubble_us(fused, model), bubble_us(split, model)
    assert b3 == pytest.approx(b1 + 2 * model.in_graph_kernel)  # two more in-graph launches before the forward
    ctx = PassContext(model=model)
    out = PassManager([SplitHead(split)]).run(fused, ctx)
    assert out is fused
    assert ctx.notes == [f"split-head: rewrite dropped: it would lengthen the bubble from {b1:.1f} to {b3:.1f} us"]
    # the costs decide: where an in-graph launch costs nothing the split lengthens nothing and is taken
    free = CostModel.from_dict({"in_graph_kernel": 0.0})
    ctx = PassContext(model=free)
    assert PassManager([SplitHead(split)]).run(fused, ctx) is split and ctx.notes == []


def test_the_default_pipeline_decides_with_the_contexts_model():
    """A calibration that makes the head's in-graph launch dearer than its members' issue moves capture's choice."""
    before = build_boundary("draft-to-verify", width=4, batch=8)
    dear = CostModel.from_dict({"in_graph_kernel": 500.0})
    after, ctx = run_pipeline(before, DEFAULT_PIPELINE, model=dear)
    assert any("capture" in n and "lengthen" in n for n in ctx.notes)
    assert bubble_us(after, dear) <= bubble_us(run_pipeline(before)[0], dear)
