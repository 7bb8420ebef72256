"""The boundary modes, one registered strategy per file: every module here registers its mode when
the package is imported, so ``MODES`` is complete wherever it is read.  A mode is one
way to cross the boundaries for any draft; what differs per draft it asks of the engine's proposer
(``engine/proposers/``)."""

from .base import MODES, Mode, register_mode
from .baseline import BaselineMode
from .compile import CompileMode
from .inductor import InductorMode
from .specgen import SpecgenMode

__all__ = ["MODES", "BaselineMode", "CompileMode", "InductorMode", "Mode", "SpecgenMode", "register_mode"]
