"""The drafts behind the decode loop, one proposer per file (see ``base.py`` for the seam)."""

from .base import Proposer
from .block import BlockProposer
from .mtp import MTPProposer

__all__ = ["BlockProposer", "MTPProposer", "Proposer", "proposer_for"]


def proposer_for(draft) -> Proposer:
    """``draft`` as a proposer: a ``Proposer`` as it is, an MTP head or a block draft wrapped in theirs."""
    from ...models.block_draft import BlockDraft
    from ...models.mtp_head import MTPHead

    if isinstance(draft, Proposer):
        return draft
    if isinstance(draft, MTPHead):
        return MTPProposer(draft)
    if isinstance(draft, BlockDraft):
        return BlockProposer(draft)
    raise TypeError(f"no proposer for a {type(draft).__name__} (an MTPHead, a BlockDraft or a Proposer)")
