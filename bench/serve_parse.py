"""``specgen serve-bench``'s load options read as values: length distributions (``--prompt-len``,
``--output-len``) and request rates (``--rates``).  A bad value is a ``ValueError`` whose message names the
option; ``serve_config`` turns it into the option's one-line error.  The checks ``serve_config``'s settings
share (``_reads``, ``_at_least``, ``_stop_ids``) live here too."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.serving.workload import LengthDist

__all__ = ["LENGTH_FORMS", "length_dist", "rate_list"]

LENGTH_FORMS = "fixed:N, uniform:LO-HI, lognormal:MEDIAN,SIGMA,LO-HI or sharegpt"


def _reads(parse) -> Any:
    """A check from a parser: its ``ValueError`` is the message."""

    def check(value):
        if value is None:
            return None
        try:
            parse(value)
        except ValueError as e:
            return str(e)
        return None

    return check


def _at_least(lo: int, option: str, note: str = "") -> Any:
    return lambda v: f"{option} must be at least {lo}{note}, got {v}" if v is not None and v < lo else None


def _stop_ids(ids) -> str | None:
    bad = [i for i in ids or () if i < 0]
    return f"--stop-id {bad[0]}: a token id is at least 0" if bad else None


def length_dist(text: str, option: str) -> LengthDist:
    """``fixed:N`` (or ``N``), ``uniform:LO-HI``, ``lognormal:MEDIAN,SIGMA,LO-HI``, ``sharegpt`` (the
    ShareGPT-like lognormal of prompts for ``--prompt-len``, of outputs for ``--output-len``)."""
    from ..engine.serving.workload import LengthDist

    kind, _, spec = text.strip().partition(":")
    bad = ValueError(f"{option} {text}: not a length distribution (use {LENGTH_FORMS})")
    try:
        if kind == "sharegpt" and not spec:
            return LengthDist.sharegpt_prompt() if option == "--prompt-len" else LengthDist.sharegpt_output()
        if kind.isdigit() and not spec:
            return LengthDist.fixed(int(kind))
        if kind == "fixed":
            return LengthDist.fixed(int(spec))
        if kind == "uniform":
            lo, hi = spec.split("-")
            return LengthDist.uniform(int(lo), int(hi))
        if kind == "lognormal":
            median, sigma, span = spec.split(",")
            lo, hi = span.split("-")
            if float(median) <= 0 or float(sigma) < 0:
                raise ValueError(f"{option} {text}: a lognormal needs MEDIAN > 0 and SIGMA >= 0")
            return LengthDist.lognormal(float(median), float(sigma), int(lo), int(hi))
    except ValueError as e:
        if str(e).startswith(option):
            raise
        if "low <= high" in str(e):
            raise ValueError(f"{option} {text}: lengths need 1 <= LO <= HI") from None
        raise bad from None
    raise bad


def rate_list(text: str) -> tuple[float | None, ...]:
    """``--rates``: requests per second, comma-separated; ``inf`` (None here): every request at time 0."""
    out: list[float | None] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            rate = float(part)
        except ValueError:
            raise ValueError(f"--rates {text}: '{part}' is not a number (use e.g. 1,4,inf)") from None
        if math.isnan(rate) or rate <= 0:
            raise ValueError(f"--rates {text}: a rate must be > 0 requests/s (inf: all at once), got {part}")
        out.append(None if math.isinf(rate) else rate)
    if not out:
        raise ValueError(f"--rates {text}: no rates (use e.g. 1,4,inf)")
    return tuple(out)
