"""Sampled requests in the serving loop: each request's ``SamplingParams`` in the rows it holds.

A loop built with ``sampling=True`` runs a sampling engine (``engine/sampling.py``): its steps verify by
speculative rejection sampling and its draft samples, each row under the parameters in the step buffers'
``temperature``, ``top_k``, ``top_p`` and ``seed`` rows.  A row's parameters are its request's
(``Request.sampling``; greedy when it has none), written before every step whose rows changed
(``write_rows``: a join, a remap or a change of bucket), padding rows greedy.  The random keys are the
request's seed and the positions (``runtime/sampling.py``), never the row, so a request's tokens do not
depend on the rows it held: they are those of a lone ``SpecDecodeEngine`` with its parameters.

The token after the prompt is drawn as the engine's prefill draws it (``first_token``: the uniform of
stream 1 at ``P - 1``).  A sampled request readmitted after a preemption prefills its prefix but its last
token, which is the next step's input as it was (``Request.resume_len``): no token is drawn again.
"""

from __future__ import annotations

import torch

from ...models.errors import EngineError
from ...runtime.sampling import SamplingParams, SamplingTensors, first_tokens
from .rows import upload

__all__ = ["check_request", "first_token", "forward_body", "setup", "write_rows"]

PARAMS = ("temperature", "top_k", "top_p", "seed")


def setup(loop) -> None:
    """A sampling loop's engine buffers (the verify logits, the draft's distributions), after the step buffers."""
    loop._sampling_key, loop._forwards = None, {}
    if loop.engine.sampling is not None:
        loop.engine.sampling.setup()


def check_request(loop, req) -> None:
    """A sampled request needs a loop built with ``sampling=True``."""
    if req.sampled and loop.engine.sampling is None:
        raise EngineError(f"request {req.id} samples (temperature > 0): build the ServingLoop with sampling=True")


def write_rows(loop, ids: list[int], bufs: dict, launched: int) -> None:
    """The parameters of requests ``ids`` into rows ``:len(ids)`` of the step's ``bufs`` (rows to ``launched``
    greedy), uploaded without a host synchronization, and ``baseline``'s host copy of them; nothing when the
    rows and the buffers are those of the last step."""
    sampling = loop.engine.sampling
    key = (tuple(ids), id(bufs), launched)
    if sampling is None or loop._sampling_key == key:
        return
    params = [loop.requests[r].params for r in ids] + [SamplingParams()] * (launched - len(ids))
    host = SamplingTensors.of(params)
    for name in PARAMS:
        bufs[name][:launched].copy_(upload(getattr(host, name), loop.device))
    sampling.params, sampling.host = params, host
    loop._sampling_key = key


def forward_body(loop, rows: int):
    """``baseline``'s verify forward over ``rows`` rows (one per row count, kept): the target's; a sampling
    engine's also leaves the rows' filtered target distributions (integer weights and their totals) in
    ``strategy.weights`` and ``strategy.totals`` (tensors per row count, so a graph captured over them replays
    into them), which the host's rule reads."""
    e = loop.engine
    if e.sampling is None:
        return e.forward_only
    if rows not in loop._forwards:
        weights = torch.zeros(rows, loop.width, e.model.config.vocab_size, dtype=torch.int64, device=loop.device)
        totals = torch.zeros(rows, loop.width, dtype=torch.int64, device=loop.device)

        def fn() -> None:
            e.forward_only()
            target = e.sampling.target_weights(e.bufs)
            weights.copy_(target.weights)
            totals.copy_(target.totals)

        loop._forwards[rows] = fn, weights, totals
    fn, e.strategy.weights, e.strategy.totals = loop._forwards[rows]
    return fn


def first_token(req, logits: torch.Tensor, length: int) -> torch.Tensor:
    """A sampled request's token after its prefill of ``length`` tokens from the last row's ``logits[1, V]``
    (``runtime.sampling.first_tokens`` under its parameters), int32 on the device."""
    dev = logits.device
    t = SamplingTensors.of([req.params])  # on the host, uploaded without a synchronization
    bufs = {name: upload(getattr(t, name), dev) for name in PARAMS}
    return first_tokens(logits, bufs, upload(torch.tensor([length]), dev)).to(torch.int32)
