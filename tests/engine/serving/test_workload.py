"""Seeded workloads: the same seed gives the same requests, and the distributions have their shapes."""

from __future__ import annotations

import math
import statistics

import pytest

from specgen.engine.serving import ClosedLoop, LengthDist, Request, Workload


def test_the_same_seed_gives_the_same_requests_and_another_seed_others():
    w = Workload(num_requests=50, rate=4.0, prompt_len=LengthDist.uniform(1, 40), seed=7)
    a, b = w.requests(), w.requests()
    assert [(r.prompt, r.max_new_tokens, r.arrival) for r in a] == [(r.prompt, r.max_new_tokens, r.arrival) for r in b]
    c = Workload(num_requests=50, rate=4.0, prompt_len=LengthDist.uniform(1, 40), seed=8).requests()
    assert [r.prompt for r in a] != [r.prompt for r in c]


def test_poisson_arrivals_have_the_rate():
    reqs = Workload(num_requests=4001, rate=5.0, seed=1).requests()
    gaps = [b.arrival - a.arrival for a, b in zip(reqs, reqs[1:])]
    assert reqs[0].arrival == 0.0 and min(gaps) >= 0
    assert statistics.mean(gaps) == pytest.approx(1 / 5.0, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(1 / 5.0, rel=0.08)  # exponential: stdev = mean


def test_no_rate_means_everyone_at_time_zero():
    assert {r.arrival for r in Workload(num_requests=10).requests()} == {0.0}


def test_fixed_and_uniform_lengths():
    fixed = Workload(num_requests=20, prompt_len=LengthDist.fixed(9), output_len=LengthDist.fixed(3)).requests()
    assert {len(r.prompt) for r in fixed} == {9} and {r.max_new_tokens for r in fixed} == {3}
    uni = Workload(num_requests=2000, prompt_len=LengthDist.uniform(2, 6), seed=3).requests()
    counts = [sum(len(r.prompt) == n for r in uni) for n in range(2, 7)]
    assert all(300 <= c <= 500 for c in counts)  # about 400 each


def test_sharegpt_like_lengths_are_long_tailed_and_clipped():
    dist = LengthDist.sharegpt_prompt(low=4, high=1024)
    reqs = Workload(num_requests=3000, prompt_len=dist, output_len=LengthDist.sharegpt_output(), seed=11).requests()
    lens = [len(r.prompt) for r in reqs]
    assert min(lens) >= 4 and max(lens) <= 1024 and max(lens) == 1024  # the tail reaches the clip
    assert statistics.median(lens) == pytest.approx(dist.median, rel=0.1)
    assert statistics.mean(lens) > statistics.median(lens)  # skewed right
    logs = [math.log(n) for n in lens if 4 < n < 1024]
    assert statistics.stdev(logs) == pytest.approx(dist.sigma, rel=0.15)


def test_a_designated_stop_token_is_frequent():
    reqs = Workload(num_requests=200, vocab=1000, stop_token=3, stop_prob=0.25, seed=4).requests()
    toks = [t for r in reqs for t in r.prompt]
    assert all(r.stop_ids == frozenset({3}) for r in reqs)
    assert sum(t == 3 for t in toks) / len(toks) == pytest.approx(0.25, abs=0.03)
    assert all(not r.stop_ids for r in Workload(num_requests=5).requests())


def test_closed_loop_replaces_each_finished_request():
    loop = ClosedLoop(Workload(num_requests=5, rate=100.0, seed=0), in_flight=2)
    first = loop.start()
    assert [r.id for r in first] == [0, 1] and {r.arrival for r in first} == {0.0}
    nxt = loop.on_finish(now=2.5)
    assert [(r.id, r.arrival) for r in nxt] == [(2, 2.5)]
    assert [r.id for r in loop.on_finish(3.0) + loop.on_finish(3.0)] == [3, 4] and loop.on_finish(4.0) == []


def test_bad_workloads_are_refused():
    with pytest.raises(ValueError):
        LengthDist("zipf", 1, 2)
    with pytest.raises(ValueError):
        LengthDist.uniform(5, 2)
    with pytest.raises(ValueError):
        Workload(num_requests=1, rate=0.0)
    with pytest.raises(ValueError):
        Workload(num_requests=1, vocab=4, stop_token=4)
    with pytest.raises(ValueError):
        Request(0, prompt=(), max_new_tokens=1)


@pytest.mark.parametrize("name", ["requests", "workload", "block_pool", "scheduler"])
def test_the_docstring_examples_run(name):
    import doctest
    import importlib

    module = importlib.import_module(f"specgen.engine.serving.{name}")
    assert doctest.testmod(module).failed == 0
