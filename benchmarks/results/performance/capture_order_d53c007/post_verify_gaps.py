"""The gaps around the block step graphs, per trace: medians over the profiled steps.

    python benchmarks/results/performance/capture_order_d53c007/post_verify_gaps.py > post_verify_gaps.txt
    python benchmarks/results/performance/capture_order_d53c007/post_verify_gaps.py TRACE.json.gz ...

With no argument: this folder's B = 1 traces.

argmax->tail: the forward's last kernel to the tail kernel (and whether both ran on one stream); after tail: the gaps
between the tail, the two context stores and the host mirror's pack; ->next draft: the step graph's last kernel to
the next step's first draft record; draft->step: the draft's last record to the step graph's first kernel;
head->forward: the head's end to the forward's first kernel.
"""

import statistics as st
import sys
from pathlib import Path

from specgen.bench import kernel_timeline as kt
from specgen.bench.profiler import read_trace

HERE = Path(__file__).parent


def gaps(path: Path) -> dict:
    events, forward, draft = read_trace(path)
    steps = kt.attribute(events, draft)
    keys, rows = list(steps), []
    for k in range(len(keys) - 1):
        s, n = steps[keys[k]], steps[keys[k + 1]]
        v = sorted((r for r in s.verify if r.cat == "kernel"), key=lambda r: r.start)
        tail = next(r for r in v if "context_tail_update" in r.name)
        before = max((r for r in v if r.start < tail.start), key=lambda r: r.end)
        after = [r for r in v if r.start > tail.start]
        last = max(after, key=lambda r: r.end)
        head = next(r for r in v if "head_update" in r.name)
        first_fwd = kt.forward_span(s.verify, forward)[0]
        rows.append(
            {
                "argmax->tail": tail.start - before.end,
                "same stream": before.stream == tail.stream,
                "after tail": [round(b.start - a.end, 1) for a, b in zip([tail, *after[:-1]], after)],
                "->next draft": min(r.start for r in n.draft) - last.end,
                "draft->step": min(r.start for r in v) - max(r.end for r in s.draft),
                "head->forward": first_fwd.start - head.end,
            }
        )
    out = {}
    for key in rows[0]:
        vals = [r[key] for r in rows]
        if key == "after tail":
            out[key] = [round(st.median(col), 1) for col in zip(*vals)]
        elif key == "same stream":
            out[key] = all(vals)
        else:
            out[key] = round(st.median(vals), 1)
    return out


if __name__ == "__main__":
    for path in [Path(a) for a in sys.argv[1:]] or sorted(HERE.glob("trace_*_b1.json.gz")):
        print(path.name, gaps(path))
    sys.exit(0)
