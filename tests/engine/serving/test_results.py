"""What a serving run records and the figures taken from it, on runs built by hand with values worked out here."""

from __future__ import annotations

import json

import pytest

from specgen.engine.serving import RequestRecord, ServeRun, StepRecord, percentiles


def test_percentiles_interpolate_between_closest_ranks():
    # four values: positions (n - 1) q / 100 = 1.5, 2.7, 2.97
    assert percentiles([4.0, 1.0, 3.0, 2.0]) == pytest.approx({"p50": 2.5, "p90": 3.7, "p99": 3.97})
    # five values: positions 2, 3.6, 3.96
    assert percentiles([10.0, 20.0, 30.0, 40.0, 50.0]) == pytest.approx({"p50": 30.0, "p90": 46.0, "p99": 49.6})


def test_percentiles_of_one_value_and_of_none():
    assert percentiles([0.25]) == {"p50": 0.25, "p90": 0.25, "p99": 0.25}
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None}


def test_a_request_record_gives_ttft_tpot_and_inter_token_latencies():
    r = RequestRecord(3, arrival=1.0, prompt_len=8, token_times=[1.5, 1.5, 2.0, 2.5], output_len=4, finish="stop")
    assert r.ttft == pytest.approx(0.5)
    assert r.tpot == pytest.approx(1.0 / 3)  # (2.5 - 1.5) over three gaps
    assert r.itls() == pytest.approx([0.0, 0.5, 0.5])  # tokens of one step share a time
    one = RequestRecord(4, arrival=0.0, prompt_len=8, token_times=[0.75], output_len=1, finish="length")
    assert one.ttft == 0.75 and one.tpot is None and one.itls() == []
    none = RequestRecord(5, arrival=0.0, prompt_len=8)
    assert none.ttft is None and none.tpot is None and none.itls() == []


def _run() -> ServeRun:
    run = ServeRun(mode="specgen", draft="mtp", depth=3, rate=2.0, elapsed_s=4.0, preemptions=1)
    run.requests += [
        RequestRecord(0, arrival=0.0, prompt_len=4, token_times=[0.5, 1.0, 1.5], output_len=3, finish="length"),
        RequestRecord(1, arrival=0.5, prompt_len=6, token_times=[1.5, 1.5, 2.5], output_len=3, finish="stop"),
        # still running when the run ended: its tokens count, it does not count as finished
        RequestRecord(2, arrival=1.0, prompt_len=5, token_times=[3.0, 4.0], output_len=2, preemptions=1),
    ]
    run.steps += [
        StepRecord(t=0.5, batch=1, fast_path=True, host_syncs=0, tokens=1, proposed=3, accepted=0),
        StepRecord(
            t=1.5,
            batch=2,
            fast_path=True,
            host_syncs=0,
            tokens=3,
            proposed=6,
            accepted=3,
            joined=1,
            remap_path="kernel",
        ),
        StepRecord(
            t=2.5,
            batch=2,
            fast_path=False,
            host_syncs=2,
            tokens=2,
            proposed=6,
            accepted=1,
            reason="guard",
            remaps=1,
            remap_path="torch",
            remap_reason="guard_failed",
        ),
        StepRecord(t=3.0, batch=1, fast_path=False, host_syncs=1, tokens=1, proposed=3, accepted=2, reason="guard"),
        StepRecord(t=4.0, batch=1, fast_path=False, host_syncs=1, tokens=1, proposed=3, accepted=0),
    ]
    return run


def test_metrics_of_a_hand_built_run():
    m = _run().metrics()
    assert (m["requests"], m["finished"], m["output_tokens"]) == (3, 2, 8)
    assert m["request_throughput"] == pytest.approx(2 / 4.0)
    assert m["output_tokens_per_s"] == pytest.approx(8 / 4.0)
    assert m["ttft_s"] == pytest.approx({"p50": 1.0, "p90": 1.8, "p99": 1.98})  # ttfts 0.5, 1.0, 2.0
    assert m["tpot_s"] == pytest.approx({"p50": 0.5, "p90": 0.9, "p99": 0.99})  # tpots 0.5, 0.5, 1.0
    # itls 0.5, 0.5 | 0.0, 1.0 | 1.0 -> sorted 0, .5, .5, 1, 1
    assert m["itl_s"] == pytest.approx({"p50": 0.5, "p90": 1.0, "p99": 1.0})
    assert m["acceptance"] == pytest.approx(6 / 21)
    assert m["decode_steps"] == 5
    assert m["fast_path_share"] == pytest.approx(2 / 5) and m["fast_path_steps"] == 2
    assert m["fallbacks"] == {"guard": 2, "unknown": 1}  # a fallback without a reason is "unknown"
    # two steps changed rows: one remapped by the kernel family, one in torch (and why)
    assert m["transitions"] == {"steps": 2, "kernel": 1, "torch": {"guard_failed": 1}}
    assert m["host_syncs_per_step"] == pytest.approx(4 / 5)
    assert m["preemptions"] == 1
    run = _run()
    run.prefill_chunks, run.prefill_host_syncs = 4, 3
    run.longest_iteration_s, run.longest_iteration_step = 0.75, 9
    m = run.metrics()
    assert m["host_syncs_per_prefill"] == pytest.approx(3 / 4)
    assert (m["longest_iteration_s"], m["longest_iteration_step"]) == (0.75, 9)


def test_without_elapsed_time_the_last_step_ends_the_run():
    run = _run()
    run.elapsed_s = 0.0
    m = run.metrics()
    assert m["output_tokens_per_s"] == pytest.approx(8 / 4.0)  # the last step at t = 4.0
    run.steps[-1].t = 2.0
    assert run.metrics()["request_throughput"] == pytest.approx(2 / 3.0)  # now the step at t = 3.0 is last


def test_a_run_where_no_request_finished():
    run = ServeRun(mode="baseline", draft="mtp", depth=3, elapsed_s=2.0)
    run.requests.append(RequestRecord(0, arrival=0.0, prompt_len=4, token_times=[1.0], output_len=1))
    m = run.metrics()
    assert (m["finished"], m["request_throughput"], m["output_tokens_per_s"]) == (0, 0.0, 0.5)
    assert m["ttft_s"]["p50"] == 1.0 and m["tpot_s"]["p50"] is None and m["itl_s"]["p99"] is None


def test_an_empty_run_has_no_figures_and_no_division_by_zero():
    m = ServeRun(mode="baseline", draft="mtp", depth=3).metrics()
    assert m["requests"] == m["finished"] == m["output_tokens"] == m["decode_steps"] == m["preemptions"] == 0
    for key in ("request_throughput", "output_tokens_per_s", "acceptance", "fast_path_share", "host_syncs_per_step",
                "host_syncs_per_prefill"):  # fmt: skip
        assert m[key] is None, key
    for key in ("ttft_s", "tpot_s", "itl_s"):
        assert m[key] == {"p50": None, "p90": None, "p99": None}
    assert m["fallbacks"] == {}


def test_to_json_holds_settings_metrics_and_every_record_and_is_json():
    run = _run()
    run.settings = {"max_batch": 4}
    data = json.loads(json.dumps(run.to_json()))
    assert {k: data[k] for k in ("mode", "draft", "depth", "rate", "in_flight")} == {
        "mode": "specgen",
        "draft": "mtp",
        "depth": 3,
        "rate": 2.0,
        "in_flight": None,
    }
    assert data["settings"] == {"max_batch": 4}
    assert data["metrics"]["fallbacks"] == {"guard": 2, "unknown": 1}
    assert len(data["requests"]) == 3 and data["requests"][2]["finish"] is None
    assert data["requests"][1]["token_times"] == [1.5, 1.5, 2.5]
    assert len(data["steps"]) == 5 and data["steps"][2]["reason"] == "guard"
    assert set(data["steps"][0]) >= {
        "t",
        "batch",
        "fast_path",
        "host_syncs",
        "tokens",
        "proposed",
        "accepted",
        "reason",
        "bucket",
    }
