"""Sampling batches: their tails plan ``spec_rejection_verify`` where greedy batches plan ``greedy_prefix_verify``.

``verify-to-draft-sampled`` and ``context-kv-sampled`` are the greedy tails with the sampling
parameters and the draft's probabilities among the sources, the vocabulary pass (``sample_rows``)
after the target forward and speculative rejection sampling as the acceptance.  The default pipeline
takes their bubble away like the greedy ones', the fused acceptance op is the family's semantics, and
every other step of the plan is the greedy plan's.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.passes import build_boundary, plan_boundary, plan_variants, run_pipeline, summary
from specgen.passes.ir import variant_of
from specgen.passes.ir.interpreter import outputs_equal
from specgen.runtime.semantics import run_semantics
from specgen.specializations.families import COMPOSITES, FAMILIES, GREEDY_VERIFY, REJECTION_VERIFY
from specgen.specializations.matrix import Matrix
from specgen.specializations.plan import (
    BOUNDARY_NAMES,
    CONTEXT_KV,
    SAMPLED_CONTEXT_KV,
    SAMPLED_TAILS,
    SAMPLED_VERIFY_TO_DRAFT,
    VERIFY_TO_DRAFT,
    PlanStep,
)
from specgen.specializations.variants import Layout, VariantSpec

BS, BT = 16, 8
NEXT = {
    SAMPLED_VERIFY_TO_DRAFT: ("prepare_next_draft",),
    SAMPLED_CONTEXT_KV: ("prepare_next_block", "context_kv_update"),
}


def test_the_sampled_tails_are_boundaries():
    assert SAMPLED_TAILS == {VERIFY_TO_DRAFT: SAMPLED_VERIFY_TO_DRAFT, CONTEXT_KV: SAMPLED_CONTEXT_KV}
    assert set(SAMPLED_TAILS.values()) <= set(BOUNDARY_NAMES)
    for greedy, sampled in SAMPLED_TAILS.items():
        g = build_boundary(sampled, width=4, batch=2)
        assert g.name == sampled and [o.name for o in g.ops] == [
            o.name for o in build_boundary(greedy, width=4, batch=2, sampling=True).ops
        ]
        assert {"temperature", "top_k", "top_p", "seeds", "draft_probs"} <= set(g.values)
        assert not {"temperature", "draft_probs"} & set(build_boundary(greedy, width=4, batch=2).values)


@pytest.mark.parametrize("name", sorted(NEXT))
@pytest.mark.parametrize("width", [2, 4, 16])
def test_the_pipeline_takes_the_bubble_and_keeps_the_values(name, width):
    before = build_boundary(name, width=width, batch=4, block_size=BS, block_table_width=BT)
    after, ctx = run_pipeline(before)
    sb, sa = summary(before), summary(after)
    assert sa["host_syncs_on_critical_path"] == 0 < sb["host_syncs_on_critical_path"]
    assert sa["host_calls_after_final_draft"] == 0
    assert sa["predicted_bubble_us"] < sb["predicted_bubble_us"]
    (tail,) = [f["family"] for f in sa["kernel_families"]]  # the acceptance and what follows it, one launch
    assert FAMILIES[tail].members == (REJECTION_VERIFY, *NEXT[name])
    assert sa["graph_ops"][:3] == ["target_forward", "sample_rows", f"{tail}__w{width}_bt{BT}_bs{BS}"]
    assert not any("not fused" in n for n in ctx.notes)
    assert outputs_equal(before, after, seed=width) == []


layouts = st.builds(
    Layout,
    st.integers(2, 16),
    st.sampled_from([1, 3, 8, 64]),
    st.sampled_from([5, 16, 128]),
    st.sampled_from(["int32", "int64"]),
).filter(lambda lay: lay.width + 1 <= lay.block_table_width * lay.block_size)


@settings(max_examples=25, deadline=None)
@given(layouts, st.sampled_from(sorted(SAMPLED_TAILS)))
def test_a_sampling_plan_is_the_greedy_plan_with_rejection_verify(layout, greedy_tail):
    """Wherever the greedy tail plans ``greedy_prefix_verify``, the sampled tail plans the vocabulary pass
    and ``spec_rejection_verify`` at the same width; every other step is the same."""
    greedy = plan_boundary(greedy_tail, layout).steps
    sampled = plan_boundary(SAMPLED_TAILS[greedy_tail], layout).steps
    want = []
    for step in greedy:
        members = FAMILIES[step.variant.family].members if step.variant is not None else ()
        if step.variant is not None and GREEDY_VERIFY in (step.variant.family, *members):
            # the family (or the composite) with the rejection rule in the greedy rule's place
            swapped = tuple(REJECTION_VERIFY if m == GREEDY_VERIFY else m for m in members)
            family = next(n for n, ms in COMPOSITES.items() if ms == swapped) if members else REJECTION_VERIFY
            want += [PlanStep("other", "sample_rows"), PlanStep.kernel(VariantSpec.of(family, layout))]
        else:
            want.append(step)
    assert list(sampled) == want
    assert GREEDY_VERIFY not in {v.family for v in plan_boundary(SAMPLED_TAILS[greedy_tail], layout).kernels}


def test_the_build_makes_the_family_for_every_sampled_tail():
    matrix = Matrix(widths=(4,), block_table_widths=(64,), block_sizes=(128,), block_widths=(16,))
    specs, needed_by, _ = plan_variants(matrix, boundaries=(SAMPLED_VERIFY_TO_DRAFT, SAMPLED_CONTEXT_KV))
    keys = {s.key for s in specs}
    assert {f"{REJECTION_VERIFY}__w4", f"{REJECTION_VERIFY}__w16"} <= keys and not any(GREEDY_VERIFY in k for k in keys)
    assert needed_by[f"{REJECTION_VERIFY}__w4"] == {SAMPLED_VERIFY_TO_DRAFT, SAMPLED_CONTEXT_KV}
    assert needed_by[f"{REJECTION_VERIFY}__w16"] == {SAMPLED_CONTEXT_KV}  # a block draft's width


def _fused_acceptance(name, width, batch):
    graph, _ = run_pipeline(
        build_boundary(name, width=width, batch=batch, block_size=BS, block_table_width=BT), "sync-to-event,fuse"
    )
    (op,) = [o for o in graph.ops if (v := variant_of(o)) is not None and v.family == REJECTION_VERIFY]
    return graph, op


FLOATS = st.one_of(st.floats(0, 1, width=32), st.floats(width=32))


@pytest.mark.parametrize("name", sorted(NEXT))
@settings(max_examples=30, deadline=None)
@given(width=st.integers(2, 7), batch=st.integers(1, 5), data=st.data())
def test_the_fused_acceptance_is_the_family(name, width, batch, data):
    """The engine's sampled acceptance ops, fused, compute ``spec_rejection_verify`` over any float inputs
    (NaN, infinities, negative probabilities) and a mix of greedy rows."""
    graph, op = _fused_acceptance(name, width, batch)
    assert op.reads == (
        "draft_tokens",
        "target_tokens",
        "draft_probs",
        "target_draft_probs",
        "accept_uniforms",
        "temperature",
    )
    bufs = {}
    for r in op.reads:
        v = graph.values[r]
        shape = tuple(int(s) for s in v.shape)
        n = shape[0] * (shape[1] if len(shape) > 1 else 1)
        if v.dtype == "float32":
            drawn = data.draw(st.lists(st.one_of(st.just(0.0), FLOATS), min_size=n, max_size=n), label=r)
        else:
            drawn = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n), label=r)
        bufs[r] = torch.tensor(drawn, dtype=getattr(torch, v.dtype)).reshape(shape)
    want = dict(zip(op.writes, op.fn(*(bufs[r] for r in op.reads))))
    bufs.update({w: torch.full_like(t, -777) for w, t in want.items()})
    run_semantics(REJECTION_VERIFY, bufs, block_size=BS)
    for w, t in want.items():
        assert torch.equal(bufs[w].long(), t.long()), f"{name}: '{w}' differs"
