"""The pass registry and the pass manager.

A pipeline is written ``sync-to-event,hoist,fuse{max-group=8},capture``;
the manager verifies the graph (structure and races) after every pass,
times each pass, and can dump every stage as ``{idx:03d}_{pass}.txt``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path
from typing import Callable

from .base import Pass, PassContext
from .capture import Capture
from .fuse import Fuse
from .fuse_chain import FuseChain
from .hoist import Hoist
from .ir import BoundaryGraph, BoundaryGraphError
from .ir.cost import CostModel
from .ir.render import render_text
from .ir.verify import verify
from .sync_to_event import SyncToEvent

# The registry: a pipeline names passes by these keys (a test checks each key is its pass's ``name``).
PASSES: dict[str, type[Pass]] = {p.name: p for p in (SyncToEvent, Hoist, Fuse, FuseChain, Capture)}

# The default pipeline, in the order that makes each step possible:
DEFAULT_PIPELINE = (
    "sync-to-event,"  # host round trips become device ops first, so nothing token-dependent stays on the host
    "hoist,"  # what is left on the host (sources, graph-task patches) overlaps the final draft
    "fuse,"  # the device updates now sit together on the graph stream: one family op each
    "fuse-chain,"  # and a chain of family ops with a composite family becomes one launch
    "capture"  # and the family ops join the captured graph at its head (or tail)
)

_SPEC = re.compile(r"^([a-z][a-z0-9-]*)(?:\{([^}]*)\})?$")


class PassPipelineError(ValueError):
    """A pipeline text that names an unknown pass or option."""


def parse_pipeline(text: str) -> list[Pass]:
    """``"hoist,fuse{max-group=8}"`` -> ``[Hoist(), Fuse(max_group=8)]``."""
    passes = []
    for item in filter(None, (s.strip() for s in re.split(r",(?![^{]*\})", text))):
        m = _SPEC.match(item)
        if not m or m.group(1) not in PASSES:
            raise PassPipelineError(f"unknown pass '{item}' (known: {', '.join(PASSES)})")
        cls = PASSES[m.group(1)]
        fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(cls)}
        options = {}
        for opt in filter(None, (m.group(2) or "").split(",")):
            key, _, val = opt.partition("=")
            if key.strip() not in fields:
                raise PassPipelineError(f"pass '{cls.name}' has no option '{key.strip()}'")
            f = fields[key.strip()]
            options[f.name] = int(val) if f.type in (int, "int") else val.strip()
        passes.append(cls(**options))
    return passes


@dataclasses.dataclass
class PassManager:
    passes: list[Pass]
    # on unless SPECGEN_VERIFY=0 (production); the test suite forces it on
    verify_each: bool = dataclasses.field(default_factory=lambda: os.environ.get("SPECGEN_VERIFY", "1") != "0")
    dump_dir: Path | None = None
    on_stage: Callable[[int, str, BoundaryGraph], None] | None = None
    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    max_rounds: int = 4

    @classmethod
    def from_text(cls, text: str = DEFAULT_PIPELINE, **kw) -> "PassManager":
        return cls(parse_pipeline(text), **kw)

    def run(self, graph: BoundaryGraph, ctx: PassContext | None = None) -> BoundaryGraph:
        """Run the pipeline, then again while a round still changes the graph (up to ``max_rounds``).

        One pass can open a rewrite for an earlier one (a sync that ``hoist``
        moved lets ``sync-to-event`` act, a moved copy changes where events go),
        so the result is the pipeline's fixed point: running it on its own
        output changes nothing.  Stages of the first round are dumped as
        ``NNN_pass.txt``; a later round that changed the graph as ``NNN_roundK.txt``.
        """
        ctx = ctx or PassContext()
        if self.verify_each:
            verify(graph)
        self._stage(0, "input", graph)
        stage = 0
        for rnd in range(1, self.max_rounds + 1):
            before = graph
            for p in self.passes:
                t0 = time.perf_counter()
                graph = p.apply(ctx, graph)
                self.timings[p.name] = self.timings.get(p.name, 0.0) + time.perf_counter() - t0
                if self.verify_each:
                    try:
                        verify(graph)
                    except BoundaryGraphError as e:
                        raise BoundaryGraphError(f"after pass '{p.name}': {e}", op=e.op) from e
                if rnd == 1:
                    stage += 1
                    self._stage(stage, p.name, graph)
            if graph.ops == before.ops:
                return graph
            if rnd > 1:
                stage += 1
                self._stage(stage, f"round{rnd}", graph)
                ctx.note("pipeline", f"round {rnd} changed the graph")
        ctx.note("pipeline", f"no fixed point after {self.max_rounds} rounds; the last round's graph is kept")
        return graph

    def _stage(self, idx: int, name: str, graph: BoundaryGraph) -> None:
        if self.on_stage:
            self.on_stage(idx, name, graph)
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            (self.dump_dir / f"{idx:03d}_{name}.txt").write_text(render_text(graph))


def run_pipeline(
    graph: BoundaryGraph, pipeline: str = DEFAULT_PIPELINE, model: CostModel | None = None, **kw
) -> tuple[BoundaryGraph, PassContext]:
    """Run ``pipeline`` on ``graph``, its passes deciding with ``model`` (None: the default costs); returns the
    result and the notes the passes left."""
    ctx = PassContext(model=model)
    return PassManager.from_text(pipeline, **kw).run(graph, ctx), ctx
