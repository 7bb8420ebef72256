"""What a target model tells the speculative-verify runtime about itself.

A model opts into the captured verify path by exposing
``speculative_verify_capabilities`` (an attribute or a zero-argument method)
that returns a ``SpeculativeVerifyCapabilities``; a model without it gets the
all-off default and runs the families' torch semantics (eager).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping

from ..specializations.capabilities import SpeculativeVerifyCapabilities

__all__ = ["SpeculativeVerifyCapabilities", "capabilities_of"]


def capabilities_of(model: Any) -> SpeculativeVerifyCapabilities:
    """The model's capabilities, read once; the all-off default when it declares none.

    ``model.speculative_verify_capabilities`` may be a capabilities object, a
    mapping of its fields, or a zero-argument callable returning either.
    """
    raw = getattr(model, "speculative_verify_capabilities", None)
    if raw is None:
        return SpeculativeVerifyCapabilities()
    if callable(raw) and not isinstance(raw, SpeculativeVerifyCapabilities):
        raw = raw()
    if raw is None:
        return SpeculativeVerifyCapabilities()
    if isinstance(raw, SpeculativeVerifyCapabilities):
        return raw
    if isinstance(raw, Mapping):
        known = {f.name for f in fields(SpeculativeVerifyCapabilities)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise TypeError(f"unknown speculative-verify capabilities: {', '.join(unknown)}")
        return SpeculativeVerifyCapabilities(**dict(raw))
    raise TypeError(
        f"speculative_verify_capabilities must give a SpeculativeVerifyCapabilities, got {type(raw).__name__}"
    )
