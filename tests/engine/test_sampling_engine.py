"""Sampled verification in the engine: every mode equals the host rule (baseline) for a fixed seed, for MTP and the
block drafts; temperature 0 is the greedy path; a mixed batch gives each row what it gets alone; a change of a
request's parameters takes effect at the next step, without recapture; on CUDA, in captured graphs, 0 host syncs."""

from __future__ import annotations

import random

import pytest
import torch

from specgen.engine import SpecDecodeEngine, greedy_generate
from specgen.engine.acceptance import AcceptanceMix
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.models import Qwen3Model
from specgen.models.errors import EngineError
from specgen.runtime.sampling import SamplingParams

BT, BS, NEW = 8, 16, 14
ALL_MODES = ("baseline", "compile", "specgen", "inductor")
# a mixed batch: nucleus, greedy, top-k, plain temperature (seeds of every sign and size)
MIXED = (
    SamplingParams(0.7, 0, 0.9, 5),
    SamplingParams(0.0),
    SamplingParams(1.0, 8, 1.0, -3),
    SamplingParams(2.0, 0, 1.0, 2**62),
)
# (kind, width): MTP at two widths and both block drafts
KINDS = [("mtp", 4), ("mtp", 3), ("dflash", 4), ("dspark", 4)]


def _prompts(batch: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(rng.randint(1, 10))] for _ in range(batch)]


@pytest.fixture(scope="module")
def target():
    return Qwen3Model.create("tiny", seed=0)


def _mix(model, prompts, p, width):
    if p is None:
        return None
    oracle = torch.tensor(greedy_generate(model, prompts, NEW + 3 * width + 1), device=model.embed_tokens.weight.device)
    return AcceptanceMix(p, oracle, model.config.vocab_size, seed=len(prompts))


def _run(model, kind, draft, mode, width, prompts, kernels, sampling, mix=None, backend="eager", **kw):
    eng = DRAFT_KINDS[kind].engine(
        model,
        draft,
        mode=mode,
        width=width,
        batch=len(prompts),
        block_size=BS,
        block_table_width=BT,
        library=kernels,
        acceptance=mix,
        compile_backend=backend,
        sampling=sampling,
    )
    for name, value in kw.items():
        setattr(eng, name, value)
    res = eng.run(prompts, max_new_tokens=NEW)
    if mode in ("specgen", "inductor"):
        assert res.runtime_stats["fast_path"] > 0 and res.runtime_stats["fallback"] == {}, res.runtime_stats
        assert any("spec_rejection_" in s for s in res.runtime_stats["graph"])  # the rule, alone or in its tail
    eng.close()
    return res


def _modes(kind: str) -> list[str]:
    return [m for m in ALL_MODES if m in DRAFT_KINDS[kind].modes]


@pytest.mark.parametrize("kind,width", KINDS)
def test_fixed_seed_every_mode_equals_the_host_rule(target, sampling_kernels, kind, width):
    """baseline runs the rule on the host (``rejection_verify`` over the target's filtered distributions read back);
    compile, specgen and inductor run the vocabulary pass and spec_rejection_verify in their graphs: the same
    tokens and acceptance, with the draft's own samples (MTP) and with drafts of known acceptance."""
    prompts = _prompts(len(MIXED), seed=width)
    draft = DRAFT_KINDS[kind].create(target, seed=1)
    accepted = 0
    for p in (None, 0.8):
        mix = _mix(target, prompts, p, width)
        runs = {
            m: _run(target, kind, draft, m, width, prompts, sampling_kernels, list(MIXED), mix) for m in _modes(kind)
        }
        ref = runs["baseline"]
        for mode, res in runs.items():
            assert (res.outputs, res.accepted) == (ref.outputs, ref.accepted), (kind, width, p, mode)
        assert ref.outputs[1] == greedy_generate(target, [prompts[1]], NEW)[0]  # the greedy row
        accepted += ref.accepted
    assert accepted > 0


@pytest.mark.parametrize("kind,width", [("mtp", 4), ("dflash", 4)])
def test_temperature_zero_is_the_greedy_path(target, sampling_kernels, kind, width):
    """Every row at temperature 0 through the sampled tails: the greedy engine's tokens and acceptance exactly."""
    prompts = _prompts(3, seed=7)
    draft = DRAFT_KINDS[kind].create(target, seed=1)
    mix = _mix(target, prompts, 0.7, width)
    greedy = greedy_generate(target, prompts, NEW)
    for mode in _modes(kind):
        plain = _run(target, kind, draft, "baseline", width, prompts, sampling_kernels, None, mix)
        sampled = _run(target, kind, draft, mode, width, prompts, sampling_kernels, SamplingParams(0.0, 5, 0.5, 9), mix)
        assert sampled.outputs == plain.outputs == greedy, mode
        assert sampled.accepted == plain.accepted > 0, mode


@pytest.mark.parametrize("mode", ["baseline", "specgen"])
@pytest.mark.parametrize("kind", ["mtp", "dspark"])
def test_a_mixed_batch_gives_each_row_what_it_gets_alone(target, sampling_kernels, kind, mode):
    prompts = _prompts(len(MIXED), seed=11)
    draft = DRAFT_KINDS[kind].create(target, seed=1)
    batch = _run(target, kind, draft, mode, 4, prompts, sampling_kernels, list(MIXED))
    for prompt, params, out in zip(prompts, MIXED, batch.outputs):
        alone = _run(target, kind, draft, mode, 4, [prompt], sampling_kernels, params)
        assert alone.outputs == [out], (kind, mode, params)


class _Switch:
    """Observer: after step ``at`` every row becomes ``to`` (``set_sampling``, in place); ``lens`` holds the
    outputs' lengths then (``seen``: the lengths after each commit)."""

    def __init__(self, at: int, to, seen: list[int]):
        self.at, self.to, self.seen, self.lens, self.graphs = at, to, seen, None, None

    def before_step(self, engine, i):
        pass

    def after_step(self, engine, i):
        graphs = getattr(getattr(engine.strategy, "runtime", None), "_graphs", None)
        if i == self.at:
            names = ("temperature", "top_k", "top_p", "seed")
            ptrs = [engine.bufs[n].data_ptr() for n in names]
            engine.set_sampling(self.to)
            assert [engine.bufs[n].data_ptr() for n in names] == ptrs
            self.lens = list(self.seen)
            self.graphs = None if graphs is None else dict(graphs._graphs)
        elif i > self.at and graphs is not None and self.graphs is not None:
            assert graphs._graphs == self.graphs  # the same captured graphs: nothing recaptured


def _switching_run(model, draft, mode, prompts, kernels, start, at, to, backend="eager"):
    eng = SpecDecodeEngine(
        model,
        draft,
        mode=mode,
        width=4,
        batch=len(prompts),
        block_size=BS,
        block_table_width=BT,
        library=kernels,
        compile_backend=backend,
        sampling=start,
    )
    seen: list[int] = []
    commit = eng._commit

    def counting(res, c, timed, max_new_tokens):
        commit(res, c, timed, max_new_tokens)
        seen[:] = [len(o) for o in res.outputs]

    eng._commit = counting
    eng.observer = switch = _Switch(at, to, seen)
    return eng.run(prompts, max_new_tokens=NEW).outputs, switch.lens


def test_a_change_of_parameters_takes_effect_at_the_next_step(target, sampling_kernels):
    """Sampled rows switched to greedy after step 2 continue as the target's greedy decoding of what they hold;
    every mode switches at the same step (the parameters are read from the buffers the graphs capture)."""
    prompts = _prompts(3, seed=5)
    draft = DRAFT_KINDS["mtp"].create(target, seed=1)
    start = [SamplingParams(1.0, 0, 1.0, 21 + b) for b in range(3)]
    runs = {
        m: _switching_run(target, draft, m, prompts, sampling_kernels, start, 2, SamplingParams(0.0)) for m in ALL_MODES
    }
    outputs, lens = runs["baseline"]
    assert all(r == runs["baseline"] for r in runs.values())
    for prompt, out, n in zip(prompts, outputs, lens):
        assert out[n:] == greedy_generate(target, [prompt + out[:n]], len(out) - n)[0]
    assert outputs != greedy_generate(target, prompts, NEW)  # the first steps sampled


def test_sampling_arguments_are_checked(target, sampling_kernels):
    draft = DRAFT_KINDS["mtp"].create(target, seed=1)
    kw = dict(mode="baseline", width=4, batch=2, block_size=BS, block_table_width=BT)
    with pytest.raises(EngineError, match="one SamplingParams or 2 of them"):
        SpecDecodeEngine(target, draft, sampling=[SamplingParams(1.0)] * 3, **kw)
    with pytest.raises(EngineError, match="verifies greedily"):
        SpecDecodeEngine(target, draft, **kw).set_sampling(SamplingParams(1.0))
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(-1.0)


@pytest.mark.gpu
@pytest.mark.parametrize("kind,width", KINDS)
def test_cuda_graphs_equal_the_host_rule_with_no_host_sync(sampling_kernels, monkeypatch, kind, width):
    """On CUDA (float32, no TF32), in captured graphs with the prebuilt kernels: every mode equals baseline's host
    rule for a fixed seed, the greedy row equals greedy decoding, and a specgen step syncs the host 0 times; with
    ``SPECGEN_LOGIT_TILES=1`` too, where the verify head writes its logits' tiles and the pass reads them."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen3Model.create("tiny", seed=0, device="cuda")
    prompts = _prompts(len(MIXED), seed=width)
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    for p in (None, 0.8):
        mix = _mix(model, prompts, p, width)
        runs = {
            m: _run(model, kind, draft, m, width, prompts, sampling_kernels, list(MIXED), mix, backend="inductor")
            for m in _modes(kind)
        }
        with monkeypatch.context() as m:
            m.setenv("SPECGEN_LOGIT_TILES", "1")
            runs["tiles"] = _run(model, kind, draft, "specgen", width, prompts, sampling_kernels, list(MIXED), mix)
        for mode, res in runs.items():
            assert (res.outputs, res.accepted) == (runs["baseline"].outputs, runs["baseline"].accepted), (mode, p)
        assert runs["baseline"].outputs[1] == greedy_generate(model, [prompts[1]], NEW)[0]
        for mode in ("baseline", "specgen"):
            plain = _run(model, kind, draft, mode, width, prompts, sampling_kernels, SamplingParams(0.0), mix)
            assert plain.outputs == greedy_generate(model, prompts, NEW), mode
    for tiles in ("0", "1"):  # 0 host syncs a step, with and without the logit tiles
        monkeypatch.setenv("SPECGEN_LOGIT_TILES", tiles)
        eng = DRAFT_KINDS[kind].engine(
            model,
            draft,
            mode="specgen",
            width=width,
            batch=len(prompts),
            block_size=BS,
            block_table_width=BT,
            library=sampling_kernels,
            sampling=list(MIXED),
        )
        res = eng.run(prompts, steps=6, warmup_steps=2, timing=True)
        assert [t.host_syncs for t in res.timings] == [0] * 6 and res.runtime_stats["fallback"] == {}
    # the verify head (the skinny GEMM) wrote its logits' tiles, which the pass took its largest logits from
    assert eng.sampling.vocab.kernel.key().endswith("_tiles__any")
    assert (eng.sampling.vocab.tiles[: len(prompts) * width, 0] >= 0).all()


@pytest.mark.parametrize("kind,width", [("mtp", 4), ("dflash", 4), ("dspark", 3)])
def test_every_mode_equals_a_plain_host_loop(target, sampling_kernels, kind, width):
    """With drafts of known acceptance (one-hot, q(x) = 1), every mode emits the tokens of a plain host loop of
    the rule (``oracles.sampled_reference``: one verify forward per step, ``reference_rejection_verify``'s per-row
    loops, the same keyed uniforms), over the mixed batch."""
    from oracles.sampled_reference import sampled_speculative_generate

    prompts = _prompts(len(MIXED), seed=20 + width)
    draft = DRAFT_KINDS[kind].create(target, seed=1)
    mix = _mix(target, prompts, 0.8, width)
    want = sampled_speculative_generate(target, mix, prompts, list(MIXED), NEW, width)
    for mode in _modes(kind):
        res = _run(target, kind, draft, mode, width, prompts, sampling_kernels, list(MIXED), mix)
        assert res.outputs == want, (kind, mode)
    assert want[1] == greedy_generate(target, [prompts[1]], NEW)[0]


@pytest.mark.parametrize("kind", ["mtp", "dflash"])
def test_the_hybrid_target_samples_equally_in_baseline_and_specgen(sampling_kernels, kind):
    """Over the hybrid target (qwen3.5-tiny: linear-attention state kept per accepted row), the sampled tails
    give baseline's host rule, and its greedy row is the hybrid's greedy decoding."""
    from oracles.hybrid_reference import hybrid_greedy

    from specgen.models import Qwen35Model

    model = Qwen35Model.create("qwen3.5-tiny", seed=0)
    prompts = _prompts(3, seed=9)
    draft = DRAFT_KINDS[kind].create(model, seed=1)
    runs = {
        m: _run(model, kind, draft, m, 4, prompts, sampling_kernels, list(MIXED[:3])) for m in ("baseline", "specgen")
    }
    assert (runs["specgen"].outputs, runs["specgen"].accepted) == (runs["baseline"].outputs, runs["baseline"].accepted)
    assert runs["baseline"].outputs[1] == hybrid_greedy(model, [prompts[1]], NEW)[0]


@pytest.mark.gpu
def test_cuda_hybrid_target_samples_equally_in_baseline_and_specgen(sampling_kernels):
    """The hybrid target's Triton forward in CUDA graphs (float32, no TF32): specgen equals baseline's host rule
    with 0 host syncs per step."""
    from specgen.models import Qwen35Model

    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen35Model.create("qwen3.5-tiny", seed=0, device="cuda")
    prompts = _prompts(3, seed=9)
    draft = DRAFT_KINDS["mtp"].create(model, seed=1)
    runs = {
        m: _run(model, "mtp", draft, m, 4, prompts, sampling_kernels, list(MIXED[:3])) for m in ("baseline", "specgen")
    }
    assert (runs["specgen"].outputs, runs["specgen"].accepted) == (runs["baseline"].outputs, runs["baseline"].accepted)
    eng = SpecDecodeEngine(
        model,
        draft,
        mode="specgen",
        width=4,
        batch=3,
        block_size=BS,
        block_table_width=BT,
        library=sampling_kernels,
        sampling=list(MIXED[:3]),
    )
    res = eng.run(prompts, steps=6, warmup_steps=2, timing=True)
    assert [t.host_syncs for t in res.timings] == [0] * 6


@pytest.mark.gpu
def test_cuda_a_change_of_parameters_takes_effect_without_recapture(sampling_kernels):
    """On CUDA, rows switched to greedy after step 2: specgen (captured graphs, tokens read a step late) switches at
    the same step as baseline, replaying the graphs it captured before the switch; baseline's rows continue as the
    target's greedy decoding of what they hold."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = Qwen3Model.create("tiny", seed=0, device="cuda")
    prompts = _prompts(3, seed=5)
    draft = DRAFT_KINDS["mtp"].create(model, seed=1)
    start = [SamplingParams(1.0, 0, 1.0, 21 + b) for b in range(3)]
    to = SamplingParams(0.0)
    outputs, lens = _switching_run(model, draft, "baseline", prompts, sampling_kernels, start, 2, to)
    spec, _ = _switching_run(model, draft, "specgen", prompts, sampling_kernels, start, 2, to, backend="inductor")
    assert spec == outputs
    for prompt, out, n in zip(prompts, outputs, lens):
        assert out[n:] == greedy_generate(model, [prompt + out[:n]], len(out) - n)[0]


@pytest.mark.parametrize("kind,mode", [("mtp", "specgen"), ("dflash", "baseline")])
def test_the_verify_head_writes_the_vocabulary_pass_rows(target, sampling_kernels, monkeypatch, kind, mode):
    """A sampling engine's verify forward hands the LM head the vocabulary pass's float32 rows (``logits_out``):
    the forward returns that buffer, ``VocabPass.keep`` copies nothing, and the tokens are those of an engine
    whose head writes its own tensor and is copied in (``verify_kwargs`` giving nothing).  With the generated pass
    that reads tiles (specgen, ``SPECGEN_LOGIT_TILES=1``) the head gets the pass's ``logit_tiles_out`` too, which
    the torch forward's head marks unset."""
    from specgen.engine.sampling import EngineSampling
    from specgen.runtime.vocab_pass import VocabPass

    monkeypatch.setenv("SPECGEN_LOGIT_TILES", "1")
    prompts = _prompts(3, seed=13)
    draft = DRAFT_KINDS[kind].create(target, seed=1)
    mix = _mix(target, prompts, 0.8, 4)
    seen, forward, keep = [], type(target).forward, VocabPass.keep

    def spy_forward(self, *args, **kw):
        out = forward(self, *args, **kw)
        if "logits_out" in kw:
            seen.append(("forward", out[1].data_ptr() == kw["logits_out"].data_ptr(), kw["logits_out"].dtype))
        if "logit_tiles_out" in kw:
            tiles = kw["logit_tiles_out"]
            seen.append(("tiles", tiles.shape[0] == kw["logits_out"].shape[0] and bool((tiles[:, 0] == -1).all())))
        return out

    def spy_keep(self, logits):
        seen.append(("keep", logits.data_ptr() == self.logits.data_ptr()))
        keep(self, logits)

    monkeypatch.setattr(type(target), "forward", spy_forward)
    monkeypatch.setattr(VocabPass, "keep", spy_keep)
    direct = _run(target, kind, draft, mode, 4, prompts, sampling_kernels, list(MIXED[:3]), mix)
    assert seen and ("forward", True, torch.float32) in seen and ("keep", True) in seen, seen
    assert all(s[1] for s in seen), seen  # every verification wrote into the pass's rows
    assert any(s[0] == "tiles" for s in seen) == (mode == "specgen"), seen
    monkeypatch.setattr(EngineSampling, "verify_kwargs", lambda self, rows: {})
    seen.clear()
    copied = _run(target, kind, draft, mode, 4, prompts, sampling_kernels, list(MIXED[:3]), mix)
    assert seen and not any(s[0] == "forward" for s in seen) and not any(s[1] for s in seen), seen
    assert (direct.outputs, direct.accepted) == (copied.outputs, copied.accepted)
