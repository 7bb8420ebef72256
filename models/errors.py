"""The one error type of the decode engine and its acceptance control."""

from __future__ import annotations

__all__ = ["EngineError"]


class EngineError(ValueError):
    """Bad engine configuration or input (wrong batch, too little KV capacity, unknown mode, bad p)."""
