"""A hybrid target's linear-attention state in the decode loop: W slots per sequence, device-only.

A target with linear-attention layers (``Qwen35Model``: Gated DeltaNet)
carries a recurrent state and a causal-conv window per sequence.  Sequence
``b`` owns the ``W`` slots ``state_slots[b, :] = b * W .. b * W + W - 1`` of
every linear layer's pool.  Prefill starts from the zero state and writes the
prompt's final state into slot ``state_slots[b, 0]``; then every verification
reads the committed state from ``state_read_slot[b]`` and writes the state
after each verify row ``j`` into ``state_write_slots[b * W + j]`` (both from
``spec_verify_linear_state_update`` at the head of the step, in every mode:
the host computes them after its sync in ``baseline``, the compiled or built
kernels on the device in the others).  The next step reads the slot of the
accepted row, so nothing is copied and no rejected row's state is ever read.

A warm-up run of a verify graph at capture reads and rewrites the committed
slot, which, unlike a KV write, is not idempotent; ``snapshot`` keeps the
pool so the capture leaves it as it was.
"""

from __future__ import annotations

import torch

__all__ = ["LinearState", "has_linear_state"]

I32 = torch.int32


def has_linear_state(model) -> bool:
    """Whether ``model`` is a hybrid target (it has a linear-state pool to allocate)."""
    return callable(getattr(model, "allocate_linear_state", None))


class LinearState:
    """The slots and the pool of one engine run; see the module docstring."""

    def __init__(self, model, batch: int, width: int, device):
        self.model, self.batch, self.width = model, batch, width
        self.pool = model.allocate_linear_state(batch * width)
        self.slots = torch.arange(batch * width, dtype=I32, device=device).view(batch, width)

    def prefill_kwargs(self, prompt_lens: torch.Tensor, rows: int) -> dict:
        """The zero state in; each prompt's last row writes the sequence's slot 0, every other row nothing."""
        B, dev = self.batch, self.slots.device
        write = torch.full((B * rows,), -1, dtype=I32, device=dev)
        last = torch.arange(B, device=dev) * rows + prompt_lens.long() - 1
        write[last] = self.slots[:, 0]
        return {"state_read": torch.full((B,), -1, dtype=I32, device=dev), "state_write": write}

    @staticmethod
    def verify_kwargs(bufs) -> dict:
        """What the head wrote into the step buffers: the committed slot, each row's slot."""
        return {"state_read": bufs["state_read_slot"], "state_write": bufs["state_write_slots"]}

    def snapshot(self):
        return self.pool.snapshot()

    def restore(self, saved) -> None:
        self.pool.restore(saved)

    def committed(self, accepted: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each sequence's committed ``(state, window)`` in linear layer ``layer`` after a step with ``accepted``."""
        a = accepted.to(self.slots.device).long().clamp(0, self.width - 1)
        return self.pool.read(layer, self.slots.gather(1, a[:, None])[:, 0])
