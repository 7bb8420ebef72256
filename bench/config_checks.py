"""The checks of ``specgen bench``'s settings (``bench/config.py``): each value alone, and against the others.

Each returns what is wrong (the ``BenchError``'s one-line message) or None; a relation's ``s`` is the
``BenchSettings`` (not imported here: ``bench/config.py`` imports this module).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from ..specializations.families import MAX_WIDTH
from . import support
from .support import BenchError, model_config

Check = Callable[[Any], "str | None"]  # a value -> what is wrong with it (the BenchError's message), or None


def _at_least(lo: int, message: str) -> Check:
    return lambda v: message if v < lo else None


def _values(values) -> str | None:
    if not values:
        return "--depth and --batch need at least one value each"
    if any(v < 1 for v in values):
        return "--depth and --batch values must be at least 1"
    return None


def _modes(modes) -> str | None:
    from ..engine.modes import MODES

    unknown = [m for m in modes or () if m not in MODES]
    return f"unknown mode '{unknown[0]}' (known: {', '.join(MODES)})" if unknown else None


def _draft(draft: str) -> str | None:
    from ..engine.draft_kinds import DRAFT_KINDS

    return None if draft in DRAFT_KINDS else f"unknown --draft '{draft}' (known: {', '.join(DRAFT_KINDS)})"


def _device(name) -> str | None:
    from .support import check_device

    try:
        check_device(name)
    except BenchError as e:
        return str(e)
    return None


def _widths(depths, s: Any) -> str | None:
    """The widest verify block against the KV layout, then against the kernel families' widths."""
    widest = max(depths) + 1
    if s.block_table_width and widest > s.block_table_width * s.block_size:
        return (
            f"--depth {widest - 1}: a block of {widest} rows is wider than the KV layout allows "
            f"(--block-table-width {s.block_table_width} x --block-size {s.block_size})"
        )
    if widest > MAX_WIDTH:
        return (
            f"--depth {widest - 1}: verify width {widest} is beyond the kernel families' widths "
            f"(at most {MAX_WIDTH}, --depth {MAX_WIDTH - 1}); no build has variants for it"
        )
    return None


def _weights(weights, s: Any) -> str | None:
    from ..engine.draft_kinds import DRAFT_KINDS

    ok = weights is None or DRAFT_KINDS[s.draft].loads_weights
    return None if ok else "--draft-weights loads a DFlash or DSpark draft; use it with --draft dflash or dspark"


def _positions(bt: int, s: Any) -> str | None:
    need = s.positions_needed
    if bt and bt * s.block_size < need:
        return (
            f"--block-table-width {bt} x --block-size {s.block_size} = {bt * s.block_size} "
            f"positions; {s.steps} steps at depth {max(s.depths)} with --prompt-len {s.prompt_len} need "
            f"{need} (--block-table-width 0: just enough)"
        )
    return None


def _ranks(tp: int, s: Any) -> str | None:
    """Before any rank is launched: an MTP draft, and a model whose shards divide evenly."""
    from ..engine.draft_kinds import DRAFT_KINDS

    if tp > 1 and not DRAFT_KINDS[s.draft].supports_tp:
        return f"--tp {tp} runs MTP drafts; --draft {s.draft} runs on one device (--tp 1)"
    if tp > 1:
        try:
            why = support.tp_problem(model_config(s.model), tp)
        except BenchError as e:
            return str(e)
        if why is not None:
            return f"--tp {tp}: {s.model}'s {why}"
    return None


def _tp_message(s: Any) -> str:
    return f"--tp must be at least 1, --draft-tp 1 or --tp ({s.tp}), --check-ranks at least 0"


def _choices(values: tuple[str, ...], option: str) -> Check:
    return lambda v: None if v in values else f"unknown {option} '{v}' (known: {', '.join(values)})"


def _draft_sampling(how: str, s) -> str | None:
    """``--draft-sampling argmax`` changes what a sampling MTP draft proposes; anywhere else it would change nothing,
    so it is refused rather than recorded for runs it did not touch."""
    if how == "sample":
        return None
    if s.temperature <= 0:
        return f"--draft-sampling {how} needs --temperature > 0 (greedy verification drafts the argmax already)"
    if s.draft != "mtp":
        return f"--draft-sampling {how} changes the MTP draft; a {s.draft} draft's tokens are one-hot already"
    if s.acceptance is not None:
        return f"--draft-sampling {how}: --acceptance replaces the drafts (one-hot); leave one of them out"
    return None


BLOCKS_MESSAGE = "--block-size must be at least 1 and --block-table-width at least 0 (0: just enough)"
COUNTS_MESSAGE = "--prompt-len and --bare-repeats must be at least 1"


def _temperature(t: float) -> str | None:
    ok = math.isfinite(t) and t >= 0
    return None if ok else f"--temperature must be a finite number >= 0 (0: greedy verification), got {t}"


def _top_k(k: int) -> str | None:
    return None if 0 <= k <= 2**31 - 1 else f"--top-k must be at least 0 (0: every token), got {k}"


def _top_p(p: float) -> str | None:
    return None if 0 < p <= 1 else f"--top-p must lie in (0, 1] (1: every token), got {p}"


def _sampling_check(check: bool, s: Any) -> str | None:
    if check and s.temperature > 0:
        return "--check compares with plain greedy decoding; it needs --temperature 0 (every mode is compared anyway)"
    return None


def first_problem(settings, opts) -> str | None:
    """The first failed check of ``opts`` (``(name, field, Option)``) on ``settings``: each value alone, then
    the relations between them."""
    for kind in ("check", "relation"):
        for name, _, opt in opts:
            test = getattr(opt, kind)
            why = test and (
                test(getattr(settings, name)) if kind == "check" else test(getattr(settings, name), settings)
            )
            if why:
                return why
    return None


def _draft_vocab(spec) -> str | None:
    """``--draft-vocab``: a count or a JSON file of ids (its size is checked once the model is built)."""
    if spec is None:
        return None
    from ..models.draft_vocab import parse_draft_vocab

    try:
        parse_draft_vocab(spec)
    except ValueError as e:
        return str(e)
    return None
