"""The one cost guard every pass applies."""

from specgen.passes import bubble_us, build_boundary, run_pipeline
from specgen.passes.base import PassContext, lengthens_bubble, no_worse


def _pair():
    before = build_boundary("draft-to-verify", width=4, batch=2)
    after, _ = run_pipeline(before)
    return before, after  # the pipeline's output has the shorter bubble


def test_a_shorter_bubble_is_kept_silently():
    long, short = _pair()
    ctx = PassContext()
    assert no_worse(ctx, "p", long, short) is short and ctx.notes == []
    assert no_worse(ctx, "p", long, long) is long and ctx.notes == []


def test_a_longer_bubble_is_dropped_and_noted():
    long, short = _pair()
    ctx = PassContext()
    assert lengthens_bubble(short, long)
    assert no_worse(ctx, "p", short, long) is short
    assert ctx.notes == [
        f"p: rewrite dropped: it would lengthen the bubble from {bubble_us(short):.1f} to {bubble_us(long):.1f} us"
    ]
    assert no_worse(ctx, "p", short, long, why="too slow") is short and ctx.notes[-1] == "p: too slow"


def test_without_a_context_the_guard_decides_silently():
    long, short = _pair()
    assert no_worse(None, "p", short, long) is short and no_worse(None, "p", long, short) is short
