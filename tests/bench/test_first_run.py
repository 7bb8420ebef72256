"""What a process's first run pays is paid by an untimed run; a difference the noise check rejects is not
printed as a number."""

from __future__ import annotations

import pytest

from specgen.bench import harness as bench
from specgen.bench import report as bench_report


def test_every_mode_has_an_untimed_run_before_its_first_timed_one(monkeypatch):
    from specgen.engine.engine import SpecDecodeEngine

    runs = []
    real = SpecDecodeEngine.run

    def spy(self, prompts, **kw):
        runs.append((self.mode, kw.get("timing", False), kw.get("steps")))
        return real(self, prompts, **kw)

    monkeypatch.setattr(SpecDecodeEngine, "run", spy)
    config = bench.configure(
        depths=(2, 3),
        batches=(1,),
        modes=("baseline",),
        steps=2,
        warmup=1,
        prompt_len=8,
        bare_repeats=2,
        profile_steps=0,
        device="cpu",
    )
    result = bench.run_bench(config)
    assert runs == [("baseline", False, 1), ("baseline", True, 2), ("baseline", True, 2)]  # once per process
    assert [(r["depth"], r["steps"]) for r in result["runs"]] == [(2, 2), (3, 2)]  # the warm-up adds no row


def _run(mode, quarters, depth=3, batch=1):
    return {
        "mode": mode,
        "depth": depth,
        "batch": batch,
        "width": depth + 1,
        "tpot_ms": sum(quarters) / 100,
        "acceptance": 0.5,
        "step_us_by_quarter": quarters,
    }


@pytest.mark.parametrize(
    "subject, baseline, noisy",
    [
        ([90, 91, 89, 90], [100, 100, 101, 99], False),  # -10 % in every quarter: a real difference
        ([60, 140, 80, 120], [100, 100, 100, 100], True),  # -40 % .. +40 % around 0 %: noise
        ([3000, 100, 100, 100], [100, 100, 100, 100], True),  # one slow quarter makes +725 %
    ],
)
def test_a_ratio_the_noise_check_rejects_is_printed_as_not_significant(subject, baseline, noisy):
    runs = [_run("baseline", baseline), _run("specgen", subject)]
    result = {"runs": runs, "ratios": bench.ratios(runs), "skipped_modes": {}, "acceptance_p": None}
    line = next(ln for ln in bench_report.table(result).splitlines() if "specgen TPOT vs" in ln)
    ratio = result["ratios"][0]["tpot_vs_baseline"]
    if noisy:
        assert line == "depth 3 B=1: specgen TPOT vs baseline not significant (noisy timing, see the note)"
        assert f"{ratio * 100:+.1f}%" not in line
    else:
        assert line == f"depth 3 B=1: specgen TPOT vs baseline {ratio * 100:+.1f}%"
    assert any(n.startswith("noisy timing at depth 3 B=1") for n in bench_report.notes(result)) == noisy
    assert isinstance(ratio, float)  # bench.json keeps the number
