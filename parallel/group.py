"""The tensor-parallel group: one process per device, ``torch.distributed`` underneath.

``TensorParallel`` is what the sharded model and the rank check hold: the
rank, the group size and the collectives they use (an in-place all-reduce
and an all-gather along a new leading axis).  Both are plain c10d calls on
the current stream, so they run inside captured CUDA graphs (NCCL) and
eagerly on the CPU (gloo).  ``TensorParallel.single()`` is the one-device
case, where every collective is the identity::

    tp = init_tensor_parallel(2, torch.device("cuda"))   # under torchrun: RANK, WORLD_SIZE, ...
    model = shard_model(Qwen3Model.create("tiny", seed=0, device=tp.device), tp)
    ...
    tp.close()   # after every captured graph is released
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["TensorParallel", "TPError", "init_tensor_parallel", "launched_ranks"]

LAUNCH_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class TPError(Exception):
    """A tensor-parallel setting that cannot run here (one line for the CLI)."""


def launched_ranks() -> int | None:
    """The world size when this process was started as one rank of several (torchrun's env), else None."""
    if all(k in os.environ for k in LAUNCH_ENV):
        return int(os.environ["WORLD_SIZE"])
    return None


def visible_gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_gpus(size: int) -> None:
    """``TPError`` when fewer CUDA devices are visible than ranks asked for."""
    n = visible_gpus()
    if n < size:
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={seen})" if seen is not None else ""
        raise TPError(f"--tp {size} needs {size} GPU{'s' if size > 1 else ''}, {n} visible{where}")


@dataclass(frozen=True)
class TensorParallel:
    """This process's place in the tensor-parallel group."""

    size: int = 1
    rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None  # "nccl" or "gloo"; None for one device

    @classmethod
    def single(cls, device: torch.device | str = "cpu") -> "TensorParallel":
        return cls(1, 0, torch.device(device), None)

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_writer(self) -> bool:
        """Rank 0 prints and writes results; the others only compute."""
        return self.rank == 0

    def span(self, n: int, what: str) -> tuple[int, int]:
        """This rank's contiguous share ``[lo, hi)`` of ``n`` items (``n`` must divide evenly)."""
        if n % self.size:
            raise TPError(f"{what} ({n}) does not divide evenly over {self.size} ranks")
        k = n // self.size
        return self.rank * k, (self.rank + 1) * k

    def all_reduce_(self, t: torch.Tensor) -> torch.Tensor:
        """Sum ``t`` over the ranks, in place (with two ranks the sum is the same bits on both)."""
        if self.distributed:
            dist.all_reduce(t)
        return t

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """``[size, *t.shape]``: every rank's ``t``, in rank order, on every rank."""
        if not self.distributed:
            return t[None]
        out = t.new_empty(self.size * t.numel())
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(out, t.contiguous().reshape(-1))
        return out.view(self.size, *t.shape)

    def barrier(self) -> None:
        if self.distributed:
            if self.backend == "nccl":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()

    def close(self) -> None:
        """Tear the group down.  Release captured graphs first: NCCL's teardown waits on them."""
        if not self.distributed or not dist.is_initialized():
            return
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        dist.destroy_process_group()


def init_tensor_parallel(size: int, device: torch.device | str | None = None) -> TensorParallel:
    """Join the group this process was launched into (torchrun's env), or the one-device case.

    ``device`` is the device type the ranks run on: NCCL with one GPU per rank
    (``LOCAL_RANK`` picks it) for CUDA, gloo for the CPU.
    """
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if size < 1:
        raise TPError(f"--tp must be at least 1, got {size}")
    world = launched_ranks()
    if size == 1 and world in (None, 1):
        return TensorParallel.single(dev)
    if world is None:
        raise TPError(f"--tp {size} needs {size} processes: launch with torchrun --nproc-per-node {size}")
    if world != size:
        raise TPError(f"--tp {size} but {world} processes were launched (torchrun --nproc-per-node {size})")
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
    if dev.type == "cuda":
        check_gpus(size)
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
        backend = "nccl"
    else:
        dist.init_process_group("gloo")
        backend = "gloo"
    return TensorParallel(size, rank, dev, backend)
