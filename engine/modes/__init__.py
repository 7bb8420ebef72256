"""The boundary modes, registered by name: every module here registers its modes when the
package is imported, so ``MODES`` is complete wherever it is read."""

from . import block, inductor  # noqa: F401  (register their modes)
from .base import MODES, BaselineMode, CompileMode, Mode, SpecgenMode, register_mode

__all__ = ["MODES", "BaselineMode", "CompileMode", "Mode", "SpecgenMode", "register_mode"]
