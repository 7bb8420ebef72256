"""The boundary modes, registered by name: every module here registers its modes when the
package is imported, so ``MODES`` is complete wherever it is read.  A mode is one way to cross the
boundaries for any draft; what differs per draft it asks of the engine's proposer
(``engine/proposers/``)."""

from . import inductor  # noqa: F401  (registers its mode)
from .base import MODES, BaselineMode, CompileMode, Mode, SpecgenMode, register_mode

__all__ = ["MODES", "BaselineMode", "CompileMode", "Mode", "SpecgenMode", "register_mode"]
