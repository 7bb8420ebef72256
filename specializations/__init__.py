"""The ground floor every layer stands on: kernel families, variant records, targets, the matrix, plans.

Nothing here imports torch, sympy or jinja2, so the compiler, the runtime and
the tools share one vocabulary without pulling each other in.
"""

from .capabilities import SpeculativeVerifyCapabilities
from .families import (
    BASE_GUARDS,
    BLOCK_ENTRY,
    COMPOSITES,
    DEFAULT_NUM_SPLITS,
    DRAFT_DTYPES,
    FAMILIES,
    MAX_WIDTH,
    MIN_WIDTH,
    ArgSpec,
    Family,
    GuardRule,
    register,
    shape_of,
    unregister,
)
from .guard_check import GUARD_CHECK  # registers the device guard's family
from .matrix import DEFAULT, Matrix, MatrixError, load_toml
from .plan import (
    BOUNDARY_NAMES,
    CONTEXT_KV,
    DRAFT_TO_VERIFY,
    TARGET_FORWARD,
    VERIFY_TO_DRAFT,
    Plan,
    PlanError,
    PlanStep,
)
from .targets import TARGET_NAMES, TARGET_OF_DEVICE, TARGETS, Target, target
from .variants import KeyFormatError, Layout, UnknownFamily, VariantSpec, build_command, family_of
from .vocab_sample import VOCAB_FAMILIES  # registers the vocabulary pass's families

__all__ = [
    "GUARD_CHECK",
    "VOCAB_FAMILIES",
    "ArgSpec",
    "BASE_GUARDS",
    "BLOCK_ENTRY",
    "BOUNDARY_NAMES",
    "COMPOSITES",
    "CONTEXT_KV",
    "DEFAULT",
    "DEFAULT_NUM_SPLITS",
    "DRAFT_DTYPES",
    "DRAFT_TO_VERIFY",
    "FAMILIES",
    "Family",
    "GuardRule",
    "KeyFormatError",
    "Layout",
    "MAX_WIDTH",
    "MIN_WIDTH",
    "Matrix",
    "MatrixError",
    "Plan",
    "PlanError",
    "PlanStep",
    "SpeculativeVerifyCapabilities",
    "TARGETS",
    "TARGET_FORWARD",
    "TARGET_NAMES",
    "TARGET_OF_DEVICE",
    "Target",
    "UnknownFamily",
    "VERIFY_TO_DRAFT",
    "VariantSpec",
    "build_command",
    "family_of",
    "load_toml",
    "register",
    "shape_of",
    "target",
    "unregister",
]
