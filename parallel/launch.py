"""Start one process per rank on this machine, the way ``torchrun --nproc-per-node N`` does.

``launch(cmd, n)`` runs ``n`` copies of ``cmd`` with torchrun's environment
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT`` on a free local port, ``OMP_NUM_THREADS=1``
unless set) and waits for them.
When one rank fails, or the timeout passes, the ranks still running are
stopped (a rank left waiting in a collective would otherwise wait forever);
the result is the first failing exit status, else 0.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

__all__ = ["free_port", "launch", "rank_env"]

STOP_GRACE_S = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, size: int, port: int, base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(size),
        LOCAL_WORLD_SIZE=str(size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun does: ranks do not oversubscribe the cores
    return env


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def launch(
    cmd: list[str],
    size: int,
    *,
    timeout: float | None = None,
    env: dict | None = None,
    quiet_ranks: bool = False,
    cwd=None,
) -> int:
    """Run ``size`` ranks of ``cmd``; the first nonzero exit status, 124 on timeout, else 0.

    ``quiet_ranks`` sends the stdout of ranks other than 0 to ``/dev/null``
    (their stderr stays, so their errors are seen).
    """
    port = free_port()
    procs = []
    try:
        for r in range(size):
            out = subprocess.DEVNULL if quiet_ranks and r else None
            procs.append(subprocess.Popen(cmd, env=rank_env(r, size, port, env), stdout=out, cwd=cwd))
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            codes = [p.poll() for p in procs]
            failed = [c for c in codes if c not in (None, 0)]
            if failed:
                return failed[0]
            if all(c == 0 for c in codes):
                return 0
            if deadline is not None and time.monotonic() > deadline:
                print(f"launch: {size} ranks still running after {timeout:.0f} s; stopping them", file=sys.stderr)
                return 124
            time.sleep(0.05)
    finally:
        _stop(procs)
