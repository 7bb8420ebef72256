"""Sampled verification with the target split over two gloo ranks (CPU): each rank gathers the verify rows'
logits over the whole vocabulary (``whole_logits``), so both ranks draw the same tokens, every mode equals
baseline (the host rule over the gathered rows) and the one-device engine, with the rank check after every step.

Batch 1 decodes with the MTP head's own samples (the dense residual), batch 3 with one-hot drafts accepted at
p = 0.7; a mixed batch (nucleus, greedy, top-k); the draft body whole and split.
"""

from __future__ import annotations

import pytest
import torch
from oracles.tp_jobs import HORIZON, NEW, case, run_ranks

from specgen.engine import SpecDecodeEngine, greedy_generate
from specgen.engine.acceptance import AcceptanceMix
from specgen.models import MTPHead, Qwen3Model
from specgen.runtime.sampling import SamplingParams

MODES = ("baseline", "compile", "specgen", "inductor")
PARAMS = ([0.7, 0, 0.9, 5], [0.0, 0, 1.0, 0], [1.0, 8, 1.0, -3])


def _cases() -> list[dict]:
    widths = {"baseline": (3, 4), "specgen": (3, 4), "compile": (4,), "inductor": (4,)}
    cases = [case(m, w, b, sampling=PARAMS[:b]) for m in MODES for w in widths[m] for b in (1, 3)]
    return cases + [case(m, 4, 3, draft_tp=2, sampling=PARAMS) for m in ("specgen", "baseline")]


@pytest.fixture(scope="module")
def tp_sampled(engine_kernels, sampling_kernels, tmp_path_factory):
    """Both ranks' results, from one launch of two gloo ranks."""
    return run_ranks(tmp_path_factory.mktemp("tps"), engine_kernels, _cases(), (1, 3), sampling=sampling_kernels)


def test_both_ranks_draw_the_same_tokens_in_every_mode(tp_sampled):
    job, outs = tp_sampled
    assert len(outs[0]["runs"]) == len(_cases())
    for r0, r1 in zip(*(out["runs"] for out in outs)):
        assert r0["outputs"] == r1["outputs"], (r0["mode"], r0["width"], r0["prompts"], r0["draft_tp"])
        assert all(len(o) == NEW for o in r0["outputs"])
        if r0["mode"] in ("specgen", "inductor"):
            assert r0["stats"]["fallback"] == {} and r0["stats"]["fast_path"] >= 1, r0["stats"]
            assert any("spec_rejection_" in s for s in r0["stats"]["graph"])
    for out in outs:  # every step of every run compared across the ranks
        assert out["checks"] > 2 * len(_cases())


def test_every_mode_and_draft_split_equals_baseline_and_the_one_device_engine(tp_sampled, sampling_kernels):
    job, outs = tp_sampled
    model = Qwen3Model.create("tiny", seed=0)
    head = MTPHead.create(model, seed=1)
    groups: dict[tuple, list[dict]] = {}
    for run in outs[0]["runs"]:
        groups.setdefault((run["width"], run["prompts"]), []).append(run)
    assert len(groups) == 4
    for (width, key), runs in groups.items():
        prompts = job["prompts"][key]
        mix = None
        if runs[0]["acceptance"] is not None:
            oracle = torch.tensor(greedy_generate(model, prompts, HORIZON))
            mix = AcceptanceMix(runs[0]["acceptance"], oracle, model.config.vocab_size, seed=3)
        eng = SpecDecodeEngine(
            model,
            head,
            mode="baseline",
            width=width,
            batch=len(prompts),
            block_size=16,
            block_table_width=8,
            library=sampling_kernels,
            acceptance=mix,
            sampling=[SamplingParams(*p) for p in runs[0]["sampling"]],
        )
        single = eng.run(prompts, max_new_tokens=NEW).outputs
        eng.close()
        base = next(r for r in runs if r["mode"] == "baseline" and r["draft_tp"] == 1)["outputs"]
        assert base == single, (width, key)  # tensor parallelism changes no draw
        for run in runs:
            assert run["outputs"] == base, (run["mode"], width, key, run["draft_tp"])
        if len(prompts) > 1:  # the greedy row of the mixed batch is plain greedy decoding
            assert base[1] == greedy_generate(model, [prompts[1]], NEW)[0]
