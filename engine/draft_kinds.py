"""Draft kinds, registered by name: what drafts, through which proposer, and what it supports.

A draft kind is one small subclass of ``DraftKind`` registered with
``@register_draft_kind``; ``specgen bench --draft NAME`` and
``DRAFT_KINDS[NAME]`` then find it::

    kind = DRAFT_KINDS["dflash"]
    draft = kind.create(model, seed=1)                       # or weights="folder/"
    engine = kind.engine(model, draft, mode="specgen", width=4, batch=8, library=lib)

``--depth K`` means ``K`` drafts per step, a verification of ``W = K + 1``
rows, for every kind; ``draft_rows(K)`` is the draft forward's own width.
Callers ask a kind what it supports (``modes``, ``boundaries``,
``supports_tp``, ``loads_weights``) instead of testing its name.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from ..models.block_draft import BlockDraft, BlockDraftConfig
from ..models.errors import EngineError
from ..models.mtp_head import MTPHead
from ..models.qwen3 import Qwen3Model
from ..models.qwen3_5 import Qwen35Model
from ..models.qwen3_5_mtp import Qwen35MTPHead
from ..specializations.plan import DRAFT_TO_VERIFY
from .engine import SpecDecodeEngine
from .modes import MODES
from .proposers import BlockProposer, MTPProposer, Proposer

__all__ = ["DRAFT_KINDS", "DraftKind", "draft_kind", "register_draft_kind"]

DRAFT_KINDS: dict[str, "DraftKind"] = {}


def register_draft_kind(cls: type["DraftKind"]) -> type["DraftKind"]:
    """Make ``cls`` available as ``DRAFT_KINDS[cls.name]`` (a class decorator)."""
    if not cls.name or cls.name in DRAFT_KINDS:
        raise EngineError(f"draft kind name {cls.name!r} is empty or taken")
    DRAFT_KINDS[cls.name] = cls()
    return cls


def draft_kind(name: str) -> "DraftKind":
    if name not in DRAFT_KINDS:
        raise EngineError(f"unknown draft kind '{name}' (known: {', '.join(DRAFT_KINDS)})")
    return DRAFT_KINDS[name]


class DraftKind:
    name: ClassVar[str] = ""
    proposer_class: ClassVar[type[Proposer]] = Proposer
    supports_tp: ClassVar[bool] = False  # whether the draft runs beside a tensor-parallel target
    loads_weights: ClassVar[bool] = False  # whether ``create`` takes a local checkpoint folder

    def draft_rows(self, depth: int) -> int:
        """Rows of one draft forward for ``depth`` drafts."""
        raise NotImplementedError

    def create(self, model: Qwen3Model, seed: int = 1, weights: str | Path | None = None):
        raise NotImplementedError

    @property
    def boundaries(self) -> tuple[str, ...]:
        """The plans its specgen mode runs: the draft-to-verify head and the tail after verification."""
        return (DRAFT_TO_VERIFY, self.proposer_class.tail)

    @property
    def modes(self) -> dict:
        """The registered boundary modes this kind runs, by name (read when asked: the registry may grow)."""
        return {m: cls for m, cls in MODES.items() if m not in self.proposer_class.unsupported_modes}

    def engine(self, model: Qwen3Model, draft, **kw) -> SpecDecodeEngine:
        return SpecDecodeEngine(model, self.proposer_class(draft), **kw)


@register_draft_kind
class MTPKind(DraftKind):
    """The MTP head: a chain of one-row steps after a two-row repair/new step (over a hybrid target Qwen3.5's
    MTP layer, with the checkpoint's ``mtp.*`` weights when its folder held them)."""

    name = "mtp"
    proposer_class = MTPProposer
    supports_tp = True

    def draft_rows(self, depth: int) -> int:
        return 2

    def create(self, model, seed=1, weights=None):
        if weights is not None:
            raise EngineError(
                "--draft-weights loads DFlash / DSpark drafts; the MTP head's weights are random or, over a "
                "Qwen3.5 checkpoint, its mtp.* tensors"
            )
        if not isinstance(model, Qwen35Model):
            return MTPHead.create(model, seed=seed)
        # a hybrid target: Qwen3.5's MTP layer, the checkpoint's mtp.* weights where its folder held them
        if model.mtp_tensors:
            return Qwen35MTPHead.from_checkpoint_tensors(model, model.mtp_tensors)
        return Qwen35MTPHead.create(model, seed=seed)


class _BlockKind(DraftKind):
    proposer_class = BlockProposer
    supports_tp = True  # whole on every rank: it reads the target's all-reduced taps and its whole embedding
    loads_weights = True

    def draft_rows(self, depth: int) -> int:
        return BlockDraftConfig(self.name, 1, (0,), 0, 1).rows(depth)

    def create(self, model, seed=1, weights=None):
        if weights is not None:
            return BlockDraft.from_folder(model, self.name, weights)
        cfg = model.config
        return BlockDraft.create(model, BlockDraftConfig.default(self.name, cfg.num_layers, cfg.vocab_size), seed)


@register_draft_kind
class DFlashKind(_BlockKind):
    """DFlash: one block forward of ``K + 1`` rows ``[anchor, MASK x K]``; row j predicts ``S + j``."""

    name = "dflash"


@register_draft_kind
class DSparkKind(_BlockKind):
    """DSpark: ``K`` rows, row j predicts ``S + j + 1``, biased by a sequential low-rank Markov head."""

    name = "dspark"
