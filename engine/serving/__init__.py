"""The serving layer as plain data: requests, workloads, the KV block pool and the scheduler.

Nothing here touches a model or a tensor; the runner turns a ``SchedulerOutput``
into tensors and hands the produced tokens back::

    pool = BlockPool(num_blocks=64, block_size=16)
    sched = Scheduler(pool, width=4, max_batch=8, max_prefill_tokens=256)
    for req in Workload(num_requests=100, rate=5.0, seed=0).requests():
        sched.add(req)
    out = sched.schedule(now=0.0)       # who prefills, who verifies, who was preempted
    sched.update(out, produced)         # {request id: tokens this step}
"""

from .block_pool import BlockPool
from .requests import FinishReason, Request, RequestState
from .results import RequestRecord, ServeRun, StepRecord, percentiles
from .scheduler import PrefillChunk, Scheduler, SchedulerOutput
from .workload import ClosedLoop, LengthDist, Workload

__all__ = [
    "BlockPool",
    "ClosedLoop",
    "FinishReason",
    "LengthDist",
    "PrefillChunk",
    "Request",
    "RequestRecord",
    "RequestState",
    "Scheduler",
    "SchedulerOutput",
    "ServeRun",
    "StepRecord",
    "Workload",
    "percentiles",
]
