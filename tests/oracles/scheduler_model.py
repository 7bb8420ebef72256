"""A fake model and random workloads for the serving scheduler's tests: the next token a function of the whole
sequence, plain greedy decoding as the reference, and a pool just large enough."""

from __future__ import annotations

from hypothesis import strategies as st

from specgen.engine.serving import LengthDist, Request, Workload

VOCAB, STOP = 6, 0  # a tiny vocabulary makes the stop token frequent


def next_token(seq: tuple[int, ...]) -> int:
    """The fake deterministic model: the next token is a function of the whole sequence so far."""
    return hash(seq) % VOCAB


def greedy(req: Request) -> list[int]:
    """Plain greedy decoding of the prompt alone, cut at the first stop token or the budget."""
    seq, out = req.prompt, []
    while len(out) < req.max_new_tokens:
        out.append(next_token(seq))
        seq += (out[-1],)
        if out[-1] in req.stop_ids:
            break
    return out


workloads = st.builds(
    Workload,
    num_requests=st.integers(1, 24),
    rate=st.one_of(st.none(), st.floats(0.5, 50.0)),
    prompt_len=st.sampled_from([LengthDist.fixed(5), LengthDist.uniform(1, 12), LengthDist.lognormal(6, 0.8, 1, 20)]),
    output_len=st.sampled_from([LengthDist.fixed(7), LengthDist.uniform(1, 16), LengthDist.lognormal(8, 0.8, 1, 24)]),
    vocab=st.just(VOCAB),
    stop_token=st.sampled_from([None, STOP]),
    seed=st.integers(0, 2**16),
)


def fitted_blocks(reqs, block_size, width, extra):
    """A pool just large enough for the largest request, plus ``extra`` blocks (and the scratch block)."""
    need = max(-(-(len(r.prompt) + r.max_new_tokens + width) // block_size) for r in reqs)
    return 1 + need + extra
