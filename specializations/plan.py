"""Plans as the build records them and the runtime reads them: structured, never parsed from strings.

A ``Plan`` is what the pass pipeline made of one boundary at one layout: the
captured graph's steps in order.  A step is a kernel launch (with its
``VariantSpec``), the engine's target forward, or a copy; the runtime walks
the steps of ``draft-to-verify`` and the tail of ``verify-to-draft``::

    >>> step = PlanStep.kernel(VariantSpec("greedy_prefix_verify", 4))
    >>> step.as_dict()
    {'kind': 'kernel', 'name': 'greedy_prefix_verify__w4', 'family': 'greedy_prefix_verify', 'key': 'greedy_prefix_verify__w4'}
"""

from __future__ import annotations

from dataclasses import dataclass

from .variants import Layout, VariantSpec

# draft-to-verify-linear: draft-to-verify of a hybrid target, whose linear-attention state slots join the head;
# verify-to-draft-sampled, context-kv-sampled: the two tails for a batch that samples (spec_rejection_verify
# in place of greedy_prefix_verify)
BOUNDARY_NAMES = (
    "draft-to-verify",
    "verify-to-draft",
    "context-kv",
    "draft-to-verify-linear",
    "verify-to-draft-sampled",
    "context-kv-sampled",
)
(
    DRAFT_TO_VERIFY,
    VERIFY_TO_DRAFT,
    CONTEXT_KV,
    LINEAR_DRAFT_TO_VERIFY,
    SAMPLED_VERIFY_TO_DRAFT,
    SAMPLED_CONTEXT_KV,
) = BOUNDARY_NAMES
# a tail boundary -> its form for a sampling batch
SAMPLED_TAILS = {VERIFY_TO_DRAFT: SAMPLED_VERIFY_TO_DRAFT, CONTEXT_KV: SAMPLED_CONTEXT_KV}
TARGET_FORWARD = "target_forward"
STEP_KINDS = ("kernel", "forward", "copy", "other")


class PlanError(ValueError):
    """A plan record that does not follow the schema."""


@dataclass(frozen=True, slots=True)
class PlanStep:
    kind: str  # one of STEP_KINDS
    name: str  # the variant key for kernels, else the op's name
    variant: VariantSpec | None = None

    def __post_init__(self):
        if self.kind not in STEP_KINDS:
            raise PlanError(f"step {self.name!r}: kind {self.kind!r} is not one of {', '.join(STEP_KINDS)}")
        if (self.kind == "kernel") != (self.variant is not None):
            raise PlanError(f"step {self.name!r}: a kernel step and only a kernel step carries a variant")

    @classmethod
    def kernel(cls, variant: VariantSpec) -> "PlanStep":
        return cls("kernel", variant.key, variant)

    @classmethod
    def forward(cls) -> "PlanStep":
        return cls("forward", TARGET_FORWARD)

    def as_dict(self) -> dict:
        out = {"kind": self.kind, "name": self.name}
        if self.variant is not None:
            out |= {"family": self.variant.family, "key": self.variant.key}
        return out


@dataclass(frozen=True, slots=True)
class Plan:
    boundary: str
    layout: Layout
    steps: tuple[PlanStep, ...]

    @property
    def kernels(self) -> tuple[VariantSpec, ...]:
        return tuple(s.variant for s in self.steps if s.variant is not None)

    def after_forward(self) -> tuple[PlanStep, ...]:
        """The steps that follow the target forward (the verify-to-draft tail)."""
        kinds = [s.kind for s in self.steps]
        if "forward" not in kinds:
            raise PlanError(f"{self.boundary} {self.layout.key}: the plan has no target forward")
        return self.steps[kinds.index("forward") + 1 :]

    def as_dict(self) -> dict:
        """The manifest record: the old string lists beside the structured fields."""
        return {
            "graph_ops": [s.name for s in self.steps],
            "kernel_families": [v.key for v in self.kernels],
            "layout": self.layout.as_dict(),
            "steps": [s.as_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, boundary: str, rec: dict, num_splits: int | None = None) -> "Plan":
        """A manifest record back into a plan; ``PlanError`` names what is wrong."""
        where = f"plan {boundary}"
        try:
            lay = rec["layout"]
            layout = Layout(
                int(lay["width"]),
                int(lay["block_table_width"]),
                int(lay["block_size"]),
                str(lay.get("draft_dtype", "int32")),
            )
            steps = []
            for s in rec["steps"]:
                if s["kind"] == "kernel":
                    v = VariantSpec.of(s["family"], layout, num_splits or 8)
                    if v.key != s["key"]:
                        raise PlanError(f"{where} {layout.key}: step {s['key']!r} does not match its layout")
                    steps.append(PlanStep.kernel(v))
                else:
                    steps.append(PlanStep(s["kind"], s["name"]))
        except PlanError:
            raise
        except (KeyError, TypeError, ValueError, LookupError) as e:
            raise PlanError(f"{where}: malformed record ({type(e).__name__}: {e})") from None
        return cls(boundary, layout, tuple(steps))
