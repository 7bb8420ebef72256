"""A reduced draft vocabulary: a draft's LM head over a subset of the target's token ids.

The MTP head and the DFlash / DSpark block drafts share the target's LM head, so the draft streams the
whole ``[V, H]`` weight (Qwen3.5's 248320 x 2048 in bfloat16 is about 1 GB) once per MTP token or
block forward: most of a draft's time at small batches.  Like FR-Spec's frequency-ranked subsets and
EAGLE-3's draft vocabularies, ``DraftVocab`` keeps ``N`` rows of that weight: the draft's logits cover
those ids, an argmax index maps back to a token id, and a sampling draft's distribution is zero
outside them.  The target still verifies with its whole head, so decoding stays exact; a draft can
only propose ids inside the subset.  The ids are kept in id order, so that the reduced row's argmax
(the lowest index on ties) and a draw over it (the inverse CDF in token order) are those of the whole
row with ``-inf`` outside the subset (``widen``): a sampling draft's pass reads ``N`` logits, not ``V``.

``DraftVocab(weight, 32768)`` keeps the first ``N`` ids (a view of the weight, no copy: with
byte-level BPE vocabularies the low ids are the frequent ones); ``DraftVocab(weight, ids)`` keeps
the given ids, e.g. a frequency-ranked list (``specgen draft-vocab``), in id order, as a gathered ``[N, H]`` copy.
``apply_draft_vocab`` sets it on a draft (a DSpark draft's Markov bias keeps the same rows)::

    apply_draft_vocab(draft, target.lm_head_weight, parse_draft_vocab("ids.json"))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch

__all__ = ["DraftVocab", "apply_draft_vocab", "frequency_ranked", "head_weight", "parse_draft_vocab"]


class DraftVocab:
    """``N`` rows of a ``[V, H]`` LM head weight and the map from a row to its token id."""

    def __init__(self, weight: torch.Tensor, keep: int | Sequence[int] | torch.Tensor):
        vocab = weight.shape[0]
        self.vocab_size = vocab
        if isinstance(keep, int):
            if not 1 <= keep <= vocab:
                raise ValueError(f"a draft vocabulary keeps 1 to {vocab} ids (the target's vocabulary), not {keep}")
            self.ids, self.weight = None, weight[:keep]
            return
        ids = torch.as_tensor(keep).reshape(-1)
        if ids.numel() == 0 or ids.dtype == torch.bool or ids.is_floating_point():
            raise ValueError("a draft vocabulary's ids are a non-empty list of integers")
        ids = torch.sort(ids.to(torch.int64).cpu()).values  # id order: see the module docstring
        bad = ids[(ids < 0) | (ids >= vocab)]
        if bad.numel():
            raise ValueError(f"draft vocabulary id {int(bad[0])} lies outside the target's vocabulary [0, {vocab})")
        if torch.unique(ids).numel() != ids.numel():
            raise ValueError("a draft vocabulary lists every id once; this list repeats some")
        if torch.equal(ids, torch.arange(ids.numel())):  # the first N ids: a view
            self.ids, self.weight = None, weight[: ids.numel()]
            return
        self.ids = ids.to(weight.device)
        self.weight = self.rows(weight)

    @property
    def size(self) -> int:
        return self.weight.shape[0]

    def rows(self, weight: torch.Tensor) -> torch.Tensor:
        """The subset's rows of a ``[V, ...]`` weight: a view for the first ``N`` ids, else a gathered copy."""
        return weight[: self.size] if self.ids is None else weight.index_select(0, self.ids.to(weight.device))

    def tokens(self, index: torch.Tensor) -> torch.Tensor:
        """The token ids of row indices ``index`` (an argmax over the reduced logits)."""
        return index if self.ids is None else self.ids[index.long()]

    def scatter(self, out: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Reduced rows ``[n, N]`` (a draft's filtered distribution ``q``) into the subset's columns of ``out[n, V]``,
        in place; the other columns keep what they hold (a sampling engine's ``dists``: 0 from their allocation)."""
        if self.ids is None:
            out[:, : self.size].copy_(rows)
        else:
            out.index_copy_(1, self.ids.to(out.device), rows.to(out.dtype))
        return out

    def widen(self, logits: torch.Tensor) -> torch.Tensor:
        """Reduced logits ``[n, N]`` as ``[n, V]`` logits, ``-inf`` outside the subset (probability 0 there): the
        whole-vocabulary row a draw over the reduced one equals, whenever one of its logits is finite (with none,
        the reduced row draws inside the subset, the widened one anywhere)."""
        full = logits.new_full((logits.shape[0], self.vocab_size), float("-inf"))
        if self.ids is None:
            full[:, : self.size] = logits
        else:
            full[:, self.ids] = logits
        return full


def apply_draft_vocab(draft: torch.nn.Module, weight: torch.Tensor, keep: int | Sequence[int]) -> DraftVocab:
    """``draft.draft_vocab = DraftVocab(weight, keep)`` for an MTP head or a block draft; a DSpark draft's Markov
    bias keeps the same rows of its ``w2`` (``vocab_w2``), gathered here, once, outside any graph capture."""
    vocab = DraftVocab(weight, keep)
    markov = getattr(draft, "markov_head", None)
    if markov is not None:
        markov.vocab_w2 = vocab.rows(markov.w2.weight)
    draft.draft_vocab = vocab
    return vocab


def head_weight(head: torch.nn.Module, target: torch.nn.Module) -> torch.Tensor:
    """The LM head weight an MTP head's logits use: its ``draft_vocab``'s rows, else the target's whole head."""
    vocab = getattr(head, "draft_vocab", None)
    return target.lm_head_weight if vocab is None else vocab.weight


def parse_draft_vocab(text: str) -> int | list[int]:
    """``--draft-vocab``: a count ``N`` (the first ``N`` ids) or a JSON file holding a list of token ids (or an
    object whose ``"ids"`` is one).  ``ValueError`` says what is wrong."""
    text = str(text).strip()
    if text.isdigit():
        return int(text)
    path = Path(text)
    if not path.is_file():
        raise ValueError(f"--draft-vocab takes a count of ids or a JSON file of token ids; no file '{text}'")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"--draft-vocab file '{text}' is not JSON: {e}") from None
    ids = data.get("ids") if isinstance(data, dict) else data
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ValueError(f"--draft-vocab file '{text}' holds no list of integer token ids")
    return ids


def frequency_ranked(counts: torch.Tensor, size: int) -> torch.Tensor:
    """The ``size`` ids of highest ``counts`` (a ``[V]`` tally of a corpus's tokens), most frequent first, ties
    (and ids never seen) in id order: a frequency-ranked draft vocabulary (FR-Spec's)."""
    if not 1 <= size <= counts.numel():
        raise ValueError(f"a draft vocabulary keeps 1 to {counts.numel()} ids (the target's vocabulary), not {size}")
    return torch.sort(counts, descending=True, stable=True).indices[:size]
