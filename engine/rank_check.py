"""``--check-ranks N``: every N steps, compare each rank's step state and stop at the first difference.

Tensor-parallel ranks stay consistent by construction (every rank runs the
same head update, greedy verify and next-draft preparation on identical
inputs), so this is a debug check, not a protocol: it hashes every field of
the step state on the host, all-gathers the hashes and, when any rank's
differ, raises ``RankMismatch`` on every rank, naming the first differing
field in ``ORDER``.  Reading the state synchronizes with the device, so a
checked run's timings are not representative.

The state: the tokens committed so far, every step buffer (accepted
lengths, the next tokens, positions, slots, KV lengths, the scratch slot,
the next draft's inputs, ...) and the target's hidden states the draft reads.
The KV caches are left out: each rank holds only its own heads.
"""

from __future__ import annotations

import hashlib

import torch

from ..models.errors import EngineError
from ..parallel.group import TensorParallel

__all__ = ["ORDER", "RankCheck", "RankMismatch", "step_state"]

# what a divergence shows up in first, so the named field is the nearest to its cause
ORDER = (
    "outputs",
    "accepted",
    "next_tokens",
    "target_tokens",
    "tokens",
    "draft_tokens",
    "last_tokens",
    "positions",
    "slot_mapping",
    "kv_lens",
    "seq_lens",
    "next_seq_lens",
    "next_last_token",
    "scratch_slot",
    "draft_positions",
    "draft_slots",
    "hidden_rows",
    "block_table",
    "query_start_loc",
)


class RankMismatch(EngineError):
    """The ranks' step states differ."""


def digest(t: torch.Tensor) -> int:
    """A 64-bit hash of a tensor's shape, dtype and bytes (as a signed int64)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{tuple(t.shape)}{t.dtype}".encode())
    h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return int.from_bytes(h.digest(), "little", signed=True)


def step_state(engine, outputs: list[list[int]]) -> dict[str, torch.Tensor]:
    """The fields compared, in ``ORDER`` first, then the other step buffers by name, then the hidden states."""
    bufs = engine.bufs
    lens = [len(o) for o in outputs]
    flat = [t for o in outputs for t in o]
    state = {"outputs": torch.tensor(lens + flat, dtype=torch.int64)}
    state.update((n, bufs[n]) for n in ORDER if n in bufs)
    state.update((n, bufs[n]) for n in sorted(bufs) if n not in state)
    state["verify_hidden"] = engine.verify_hidden
    return state


class RankCheck:
    """Called by the engine after each step; checks on every ``every``-th."""

    def __init__(self, tp: TensorParallel, every: int):
        if every < 1:
            raise EngineError(f"--check-ranks takes a step interval of at least 1, got {every}")
        self.tp, self.every = tp, int(every)
        self.checks = 0

    def __call__(self, engine, step: int, outputs: list[list[int]]) -> None:
        if (step + 1) % self.every == 0:
            self.check(step_state(engine, outputs), f"after step {step} of {engine.mode} mode")

    def check(self, state: dict[str, torch.Tensor], when: str) -> None:
        names = list(state)
        mine = torch.tensor([digest(state[n]) for n in names], dtype=torch.int64, device=self.tp.device)
        table = self.tp.all_gather(mine).cpu()  # [ranks, fields]
        self.checks += 1
        differs = (table != table[:1]).any(0)
        if not bool(differs.any()):
            return
        k = int(differs.nonzero()[0])
        ranks = ", ".join(f"rank {r}: {int(table[r, k]) & (2**64 - 1):016x}" for r in range(table.shape[0]))
        raise RankMismatch(
            f"tensor-parallel ranks disagree {when}: field '{names[k]}' differs "
            f"(first of {int(differs.sum())} differing fields; hashes {ranks})"
        )
