"""``specgen serve-bench`` without a model: the small settings, a runner that builds ``ServeRun`` records by hand,
and the command's parsed arguments."""

from __future__ import annotations

import time

from specgen.cli import build_parser
from specgen.engine.serving import ClosedLoop, RequestRecord, ServeRun, StepRecord

SMALL = ["--model", "tiny", "--device", "cpu", "--num-requests", "4", "--prompt-len", "fixed:4", "--output-len",
         "uniform:2-5"]  # fmt: skip


def fake_runner(calls: list, slow: float = 0.0, fail: str | None = None):
    """A runner that serves each request alone, one token per 10 ms step (5 ms in specgen), three fast steps
    in four (every one in baseline falls back: "eager")."""

    def run(mode, load):
        calls.append((mode, load))
        if fail == mode:
            raise RuntimeError("the device went away\nsecond line")
        time.sleep(slow)
        reqs = load.start() if isinstance(load, ClosedLoop) else list(load)
        step_s = 0.005 if mode == "specgen" else 0.010
        out = ServeRun(mode=mode, draft="mtp", depth=3)
        now, queue = 0.0, list(reqs)
        while queue:
            r = queue.pop(0)
            now = max(now, r.arrival)
            times = []
            for _ in range(r.max_new_tokens):
                now += step_s
                times.append(round(now, 6))
                n = len(out.steps)
                fast = mode == "specgen" and n % 4 != 3
                out.steps.append(
                    StepRecord(
                        t=now,
                        batch=1 + n % 3,
                        fast_path=fast,
                        host_syncs=0 if fast else 1,
                        tokens=1,
                        proposed=3,
                        accepted=2 if fast else 0,
                        reason=None if fast else "eager",
                    )  # fmt: skip
                )
            out.requests.append(RequestRecord(r.id, r.arrival, len(r.prompt), times, len(times), "length"))
            if isinstance(load, ClosedLoop):
                queue += load.on_finish(now)
        out.elapsed_s = now
        return out

    return run


def serve_args(*argv):
    args = build_parser().parse_args(["serve-bench", *argv])
    args.cli_argv = ["serve-bench", *argv]
    return args
