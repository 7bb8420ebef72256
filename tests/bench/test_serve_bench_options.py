"""``specgen serve-bench``'s options and their errors: lengths, rates, settings, the workload and its sampling
share, each bad input refused in one line naming the option."""

from __future__ import annotations

import sys

import pytest
from oracles.serve_bench_runs import SMALL, fake_runner, serve_args

from specgen.bench.serve import workload_for
from specgen.bench.serve_config import Load, ServeSettings, length_dist, rate_list
from specgen.bench.support import BenchError
from specgen.cli import main
from specgen.cli import serve_bench as cli_serve
from specgen.engine.serving import ClosedLoop, LengthDist


def test_length_distributions_and_rates_read_as_written():
    assert length_dist("fixed:7", "--prompt-len") == LengthDist.fixed(7)
    assert length_dist("7", "--prompt-len") == LengthDist.fixed(7)
    assert length_dist("uniform:2-9", "--output-len") == LengthDist.uniform(2, 9)
    assert length_dist("lognormal:100,0.5,4-512", "--prompt-len") == LengthDist.lognormal(100, 0.5, 4, 512)
    assert length_dist("sharegpt", "--prompt-len") == LengthDist.sharegpt_prompt()
    assert length_dist("sharegpt", "--output-len") == LengthDist.sharegpt_output()
    assert rate_list("0.5, 4,inf") == (0.5, 4.0, None)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--rates", "1,x"], "--rates 1,x: 'x' is not a number"),
        (["--rates", "-2"], "--rates -2: a rate must be > 0"),
        (["--rates", ","], "--rates ,: no rates"),
        (["--prompt-len", "uniform:9-3"], "--prompt-len uniform:9-3: lengths need 1 <= LO <= HI"),
        (["--output-len", "normal:4"], "--output-len normal:4: not a length distribution"),
        (["--output-len", "lognormal:0,1,2-8"], "--output-len lognormal:0,1,2-8: a lognormal needs MEDIAN > 0"),
        (["--closed-loop", "0"], "--closed-loop must be at least 1"),
        (["--num-requests", "0"], "--num-requests must be at least 1"),
        (["--max-batch", "0"], "--max-batch must be at least 1"),
        (["--max-prefill-tokens", "0"], "--max-prefill-tokens must be at least 1"),
        (["--read-lag", "2"], "--read-lag must be 0 or 1, got 2"),
        (["--stop-id", "-1"], "--stop-id -1: a token id is at least 0"),
        (["--stop-id", "3", "--stop-id", "100000"], "--stop-id 100000: outside tiny's vocabulary"),
        (["--stop-id", "x"], "--stop-id: invalid int value"),
        (["--depth", "0"], "--depth must be at least 1"),
        (["--depth", "99"], "--depth 99: verify width 100 is beyond"),
        (["--block-table-width", "2"], "--block-table-width 2 x --block-size 16 = 32 positions"),
        (["--num-blocks", "2"], "--num-blocks 2: the longest request needs"),
        (["--modes", "nope"], "unknown mode 'nope'"),
        (["--modes", "compile"], "--modes: no mode runs here (compile: needs CUDA"),
        (["--draft", "eagle"], "unknown --draft 'eagle'"),
        (["--acceptance", "1.5"], "--acceptance must lie in [0, 1]"),
        (["--temperature", "-1"], "--temperature must be a finite number >= 0"),
        (["--sampled-share", "2"], "--sampled-share must lie in [0, 1]"),
        (["--top-k", "-1"], "--top-k must be at least 0"),
        (["--top-p", "0"], "--top-p must lie in (0, 1]"),
        (["--draft-sampling", "argmax"], "--draft-sampling argmax needs --temperature > 0"),
        (["--draft-sampling", "argmax", "--temperature", "1", "--acceptance", "0.5"], "--acceptance replaces"),
        (["--device", "tpu"], "--device tpu: use cpu or cuda"),
        (["--model", "nope"], "unknown --model 'nope'"),
        (["--progress-every", "0"], "--progress-every must be > 0"),
        (["--tp", "0"], "--tp must be at least 1"),
        (["--tp", "2", "--rates", "4,inf"], "--tp 2 serves --rates inf and --closed-loop only"),
        (["--tp", "3"], "--tp 3: tiny's query heads (4) does not divide evenly over 3 ranks"),
        (["--tp", "2", "--draft-tp", "3"], "--draft-tp 1 or --tp (2)"),
    ],
)
def test_bad_input_is_one_line_naming_the_option(argv, words, tmp_path, capsys):
    assert main(["serve-bench", "--device", "cpu", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specgen: error: ") and words in err, err


def test_an_unwritable_out_folder_is_refused_before_any_run(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    calls = []
    with pytest.raises(Exception, match="--out .*cannot write there"):
        cli_serve.run(serve_args(*SMALL, "--out", str(tmp_path / "file" / "sub")), runner=fake_runner(calls))
    assert calls == []


def test_without_the_serving_loop_the_command_says_so_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "specgen.engine.serving.loop", None)  # as in an installation without it
    assert main(["serve-bench", *SMALL, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the serving loop is not available" in err


def test_settings_resolve_the_device_modes_loads_and_layout():
    c = ServeSettings(device="cpu", rates="2,inf", closed_loop=3, prompt_len="fixed:20", output_len="fixed:40")
    c = c.resolve()
    assert c.modes == ("baseline", "specgen") and {m for m, _ in c.skipped} == {"compile", "inductor"}
    assert c.loads == (Load(rate=2.0), Load(), Load(in_flight=3))
    assert [x.label for x in c.loads] == ["2/s", "inf", "closed 3"]
    # 20 + 40 + 2 W = 68 positions (a step unread: room for two verify blocks): 5 blocks of 16 per request; the
    # pool holds max_batch of them and the scratch block
    assert (c.block_table_width, c.num_blocks) == (5, 8 * 5 + 1)
    # read each step before the next: 20 + 40 + W = 64 positions, 4 blocks
    c0 = ServeSettings(device="cpu", prompt_len="fixed:20", output_len="fixed:40", read_lag=0).resolve()
    assert (c0.block_table_width, c0.num_blocks, c0.read_lag) == (4, 8 * 4 + 1, 0)
    assert ServeSettings(device="cpu", closed_loop=2).resolve().loads == (Load(in_flight=2),)
    assert ServeSettings(device="cpu").resolve().loads == (Load(),)  # neither given: every request at once


def test_the_workload_is_seeded_and_carries_the_stop_ids_and_the_load():
    c = ServeSettings(device="cpu", num_requests=5, rates="4", closed_loop=2, stop_ids=(7, 9), seed=3).resolve()
    a, b = workload_for(c, c.loads[0]), workload_for(c, c.loads[0])
    assert [(r.prompt, r.max_new_tokens, r.arrival) for r in a] == [(r.prompt, r.max_new_tokens, r.arrival) for r in b]
    assert all(r.stop_ids == {7, 9} for r in a) and a[-1].arrival > 0
    assert max(t for r in a for t in r.prompt) < c.model.vocab_size
    loop = workload_for(c, c.loads[1])
    assert isinstance(loop, ClosedLoop) and loop.in_flight == 2
    first = loop.start()
    assert [r.id for r in first] == [0, 1] and all(r.stop_ids == {7, 9} and r.arrival == 0.0 for r in first)
    assert [r.prompt for r in first] == [r.prompt for r in a[:2]]  # the same seeded requests
    with pytest.raises(BenchError, match="--stop-id 600"):
        ServeSettings(device="cpu", stop_ids=(600,)).resolve()


def test_sampling_settings_go_to_a_seeded_share_of_the_requests():
    """--temperature/--top-k/--top-p for --sampled-share of the requests, request i seeded --seed + i; none at 0."""
    c = ServeSettings(device="cpu", num_requests=40, temperature=0.8, top_k=5, top_p=0.9, sampled_share=0.5, seed=3)
    c = c.resolve()
    a, b = workload_for(c, c.loads[0]), workload_for(c, c.loads[0])
    assert [r.sampling for r in a] == [r.sampling for r in b]
    sampled = [r for r in a if r.sampling is not None]
    assert 0 < len(sampled) < len(a)
    assert all((r.sampling.temperature, r.sampling.top_k, r.sampling.top_p) == (0.8, 5, 0.9) for r in sampled)
    assert all(r.sampling.seed == 3 + r.id for r in sampled)
    greedy = ServeSettings(device="cpu", num_requests=5, top_k=5).resolve()
    assert all(r.sampling is None for r in workload_for(greedy, greedy.loads[0]))
