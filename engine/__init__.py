"""The decode engine over the reference models: ``SpecDecodeEngine``, its boundary modes
(``engine.modes``, one registered strategy per file), the draft kinds, acceptance control,
and the host-driven greedy / speculative decoding loops that are the ground truth for the
tokens any optimised runtime must produce.
"""

from ..models.errors import EngineError
from .acceptance import AcceptanceMix
from .decode import SpecStats, greedy_generate, greedy_prefix, speculative_generate
from .engine import SpecDecodeEngine
from .modes import MODES, Mode, register_mode
from .results import RunResult, StepTiming

__all__ = [
    "AcceptanceMix",
    "EngineError",
    "MODES",
    "Mode",
    "RunResult",
    "SpecDecodeEngine",
    "SpecStats",
    "StepTiming",
    "greedy_generate",
    "greedy_prefix",
    "register_mode",
    "speculative_generate",
]
