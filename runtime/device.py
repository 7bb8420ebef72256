"""Streams, events and graph capture of one accelerator backend (``torch.cuda`` or ``torch.npu``).

``DeviceAPI`` hides which backend module serves the streams, events and graphs (and refuses a
backend this torch cannot run: ``BackendUnavailable``);
``BucketGraphs`` keeps the captured graph of each batch bucket of a verify runtime.
"""

from __future__ import annotations

import gc
from typing import Callable

import torch


class BackendUnavailable(RuntimeError):
    """The accelerator backend asked for cannot run in this process; the message says why and what to do."""


def check_cuda() -> None:
    """``BackendUnavailable`` unless this torch build has CUDA and sees a device (before any CUDA call)."""
    if not torch.backends.cuda.is_built():
        raise BackendUnavailable(
            f"backend 'cuda': CUDA is not available in this torch build (torch {torch.__version__} was built "
            "without CUDA); install a CUDA build of torch, or use backend='cpu'"
        )
    if not torch.cuda.is_available():
        raise BackendUnavailable(
            "backend 'cuda': this torch build has CUDA but sees no CUDA device (check the driver and "
            "CUDA_VISIBLE_DEVICES), or use backend='cpu'"
        )


class DeviceAPI:
    """Streams, events and graph capture of one accelerator backend (``torch.cuda`` or ``torch.npu``).

    Built for ``cuda`` where torch has no CUDA, it raises ``BackendUnavailable`` (not torch's assertion
    at the first CUDA call).
    """

    def __init__(self, backend: str):
        self.backend = backend
        if backend == "cuda":
            check_cuda()
        if backend == "npu":
            from .loaders import _torch_npu

            _torch_npu()  # registers torch.npu; imported only for this backend
            self.mod = torch.npu
            self.Graph = torch.npu.NPUGraph
        else:
            self.mod = torch.cuda
            self.Graph = torch.cuda.CUDAGraph

    def current_stream(self, device):
        return self.mod.current_stream(device)

    def new_stream(self, device):
        return self.mod.Stream(device=device)

    def stream(self, s):
        return self.mod.stream(s)

    def event(self, external: bool = False):
        """A new event; ``external``: captured as event record / wait nodes rather than a dependency inside the
        graph, so a graph can wait on work recorded outside it (CUDA only)."""
        return self.mod.Event(external=True) if external else self.mod.Event()

    def is_capturing(self, device=None) -> bool:
        """Whether the current stream is capturing a graph (its work is recorded, not run)."""
        return bool(self.mod.is_current_stream_capturing())

    def graph(self, g, pool):
        return self.mod.graph(g, pool=pool)

    def pool_handle(self):
        return self.mod.graph_pool_handle()

    def capture(self, fn: Callable[[], None], device, pool, warmup: int = 2):
        """``fn`` run ``warmup`` times on a side stream, then captured into a new graph.

        A dead graph freed by the garbage collector during a capture would
        invalidate it (destroying a graph is not permitted while a stream
        captures), so the collector stays off until the end.  It is not run
        first: a full collection costs ~0.2 s on a large heap, per capture, and
        with the collector off nothing is freed by it during the capture.
        """
        main = self.current_stream(device)
        side = self.new_stream(device)
        side.wait_stream(main)
        with self.stream(side):
            for _ in range(max(1, warmup)):
                fn()
        main.wait_stream(side)
        graph = self.Graph()
        enabled = gc.isenabled()
        gc.disable()
        try:
            with self.graph(graph, pool):
                fn()
        finally:
            if enabled:
                gc.enable()
        return graph


class BucketGraphs:
    """One captured graph per batch bucket, all drawing on one memory pool (made on the first capture)."""

    def __init__(self, api: DeviceAPI, device, warmup: int = 2):
        self._api, self._device, self._warmup = api, device, warmup
        self._pool = None
        self._graphs: dict[int, object] = {}

    def __contains__(self, bucket: int) -> bool:
        return bucket in self._graphs

    def capture(self, bucket: int, fn: Callable[[], None]) -> None:
        """Capture ``fn`` as ``bucket``'s graph (see ``DeviceAPI.capture``)."""
        if self._pool is None:
            self._pool = self._api.pool_handle()
        self._graphs[bucket] = self._api.capture(fn, self._device, self._pool, self._warmup)

    def replay(self, bucket: int) -> None:
        self._graphs[bucket].replay()
