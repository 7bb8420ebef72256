"""The decode loop with a block draft (DFlash, DSpark): ``SpecDecodeEngine`` with block-draft hooks.

The loop, the bounds, the commits and the timing are ``SpecDecodeEngine``'s;
what changes is the draft and what crosses the boundaries:

* the target forward taps the draft's context layers; ``verify_hidden``
  holds the taps of the verify rows ``[B * W, L_ctx * H]``;
* prefill writes context K/V for every prompt row;
* the draft graph is one block forward (``BlockDraft.propose``) from the
  anchor ``next_last_token`` at ``next_seq_lens``;
* after verification the accepted rows' taps become context K/V
  (``context_write``) and the next block's inputs are set
  (``next_block_inputs``), each mode in its own way (``block_modes.py``).

Verification is ``W = K + 1`` rows wide for both kinds; the draft forward
has ``draft.rows(K)`` rows (``K + 1`` for DFlash, ``K`` for DSpark).
"""

from __future__ import annotations

import torch

from ..models.block_draft import BlockDraft
from ..models.errors import EngineError
from ..models.qwen3 import Qwen3Model
from ..runtime.semantics import slot
from .engine import SpecDecodeEngine
from .modes.block import BLOCK_MODES

__all__ = ["BlockDecodeEngine"]

I32 = torch.int32


class BlockDecodeEngine(SpecDecodeEngine):
    """Greedy speculative decoding with a block draft; ``width = depth + 1`` as for MTP."""

    modes = BLOCK_MODES

    def __init__(self, model: Qwen3Model, draft: BlockDraft, **kw):
        super().__init__(model, draft, **kw)
        self.draft, self.depth = draft, self.width - 1
        self.draft_rows = draft.rows(self.depth)
        if self.width > self.capacity:
            raise EngineError(
                f"a block of {self.width} rows is wider than the KV layout allows "
                f"({self.block_table_width} x {self.block_size} = {self.capacity} positions)"
            )

    def _setup(self, prompts: list[list[int]], horizon: int) -> None:
        super()._setup(prompts, horizon)  # target cache, the draft's cache (``head``), the step buffers
        taps = len(self.draft.tap_layers) * self.model.config.hidden_size
        self.verify_hidden = torch.zeros(
            self.batch * self.width, taps, dtype=self.model.embed_tokens.weight.dtype, device=self.device
        )

    def _prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Target prefill with taps; context K/V for every prompt row; the first block's inputs."""
        B, BS, dev, bt = self.batch, self.block_size, self.device, self.block_table
        r = max(len(p) for p in prompts)
        toks = torch.tensor([p + [0] * (r - len(p)) for p in prompts], device=dev)
        idx = torch.arange(r, device=dev)
        pos = idx.expand(B, r)
        slots = torch.where(idx < self.prompt_lens[:, None], slot(bt, pos, BS), torch.full_like(pos, -1))
        qsl = torch.arange(B + 1, device=dev) * r
        _, logits, taps = self.model(
            toks.reshape(-1),
            pos.reshape(-1),
            slots.reshape(-1),
            bt,
            self.prompt_lens,
            qsl,
            r,
            taps=self.draft.tap_layers,
        )
        bonus = logits[torch.arange(B, device=dev) * r + self.prompt_lens - 1].argmax(-1)
        self.draft.write_context(taps, pos.reshape(-1), slots.reshape(-1))  # padding rows write nothing
        b = self.bufs
        b["accepted"].zero_()
        b["next_last_token"].copy_(bonus)
        b["next_seq_lens"].copy_(self.prompt_lens.to(I32))
        return bonus

    # -------------------------------------------------------------- the graphs
    def target_forward(self, bufs) -> torch.Tensor:
        """The target over the verify rows, keeping the tapped layers; returns ``target[B, W]``."""
        _, logits, taps = self.model(
            bufs["tokens"],
            bufs["positions"],
            bufs["slot_mapping"],
            bufs["block_table"],
            bufs["kv_lens"],
            bufs["query_start_loc"],
            self.width,
            taps=self.draft.tap_layers,
        )
        self.verify_hidden[: taps.shape[0]].copy_(taps)
        return logits.argmax(-1).to(I32).view(-1, self.width)

    def _draft(self) -> None:
        """One block forward from the anchor; writes the verification's draft tokens, last token and length."""
        b = self.bufs
        anchor, seq_lens = b["next_last_token"], b["next_seq_lens"]
        out = self.draft.propose(anchor, seq_lens, b["block_table"], self.depth)
        if self.acceptance is not None:
            out = self.acceptance.apply(out, seq_lens, self.prompt_lens)
        b["draft_tokens"].copy_(out)
        b["last_tokens"].copy_(anchor)
        b["seq_lens"].copy_(seq_lens)

    # ------------------------------------------------- after the verification
    def context_write(self) -> None:
        """Every verify row's taps -> context K/V at ``context_slots`` (-1 for rejected rows: no write)."""
        b = self.bufs
        self.draft.write_context(self.verify_hidden, b["positions"], b["context_slots"])

    def next_block_inputs(self) -> None:
        """On the device: the anchor is the bonus ``target[b, a]``, at ``S' = S + a + 1``."""
        b = self.bufs
        b["next_last_token"].copy_(b["target_tokens"].gather(1, b["accepted"].long()[:, None]).squeeze(1))
        b["next_seq_lens"].copy_(b["seq_lens"] + b["accepted"] + 1)
