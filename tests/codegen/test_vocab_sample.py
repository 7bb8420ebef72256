"""The vocabulary pass's generated families (``spec_target_sample``, ``spec_target_sample_dense``,
``spec_draft_sample``) against their torch semantics (``runtime/vocab_semantics.py``), bit for bit: every output,
on fresh random rows and on the edges (one token, a vocabulary one past and one short of the block's lanes and
of a tile, ties, NaN and -inf logits, top-k at 1 and past the valid tokens, top-p at 1, tiny and NaN, greedy rows
with NaN, draft tokens outside the vocabulary, the largest batch of the layout and the Qwen3 vocabulary on the GPU).

The c variants come from the sampling engine tests' build (``sampling_kernels``); the cuda ones, on the lent GPU,
from the same build's cuda target, through the runtime's launcher.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles.vocab_check import check_against_semantics, give_tiles

from specgen.codegen.templates import render_variant
from specgen.runtime.vocab_pass import logit_tiles_of
from specgen.specializations import FAMILIES
from specgen.specializations.variants import VariantSpec
from specgen.specializations.vocab_sample import (
    DRAFT_SAMPLE,
    LOGIT_TILE,
    MAX_VOCAB_TOKENS,
    TARGET_SAMPLE,
    TARGET_SAMPLE_DENSE,
    TARGET_SAMPLE_DENSE_TILES,
    TARGET_SAMPLE_TILES,
    VOCAB_SUMS,
    vocab_chunks,
)

W = 4
TARGETS = (TARGET_SAMPLE_TILES, TARGET_SAMPLE_DENSE_TILES)  # the families that read logit tiles
EDGE_VOCABS = (1, 2, 1023, 1024, 1025, 8191, 8193, 16385)


def _params(batch: int, gen: torch.Generator, vocab: int, setting: str | None = None):
    t = torch.rand(batch, generator=gen) * 1.5
    t[torch.rand(batch, generator=gen) < 0.25] = 0.0
    k = torch.randint(0, vocab + 2, (batch,), generator=gen, dtype=torch.int32)
    k[torch.rand(batch, generator=gen) < 0.4] = 0
    k[torch.rand(batch, generator=gen) < 0.1] = 1
    p = torch.rand(batch, generator=gen)
    p[torch.rand(batch, generator=gen) < 0.3] = 1.0
    p[torch.rand(batch, generator=gen) < 0.05] = float("nan")
    p[torch.rand(batch, generator=gen) < 0.05] = 1e-9
    if setting == "nucleus":
        t, k, p = torch.full((batch,), 0.7), torch.zeros(batch, dtype=torch.int32), torch.full((batch,), 0.9)
    seed = torch.randint(-(2**62), 2**62, (batch,), generator=gen)
    return {"temperature": t.float(), "top_k": k, "top_p": p.float(), "seed": seed}


def _logits(rows: int, vocab: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(rows, vocab, generator=gen) * (torch.rand(1, generator=gen).item() * 8)
    if vocab > 4:
        x[:, 1] = x[:, 0]  # a tie
        x[0, 2] = float("-inf")
        x[-1, 3] = float("nan")  # the last row's argmax is this NaN; its sampled rows weigh it 0
    if rows > 2:
        x[1] = 0.0  # a whole row tied (+0.0), one -0.0
        x[1, -1] = -0.0
    return x


def _args(family: str, batch: int, vocab: int, gen: torch.Generator, device, setting=None, chunks: int = 1) -> dict:
    """The family's arguments, outputs filled with -7 and the workspace for ``chunks`` blocks per row."""
    a = _params(batch, gen, vocab, setting)
    if family == DRAFT_SAMPLE:
        a["sample_positions"] = torch.randint(-10, 10**6, (batch,), generator=gen)
        a["draft_logits"] = _logits(batch, vocab, gen)
        outs = {"sampled_tokens": (batch,), "sampled_probs": (batch,), "draft_dist": (batch, vocab)}
    else:
        a["draft_tokens"] = torch.randint(-2, vocab + 2, (batch, W - 1), generator=gen, dtype=torch.int32)
        if family in (TARGET_SAMPLE, TARGET_SAMPLE_TILES):
            a["draft_probs"] = torch.rand(batch, W - 1, generator=gen)
        a["seq_lens"] = torch.randint(0, 5000, (batch,), generator=gen, dtype=torch.int32)
        a["logits"] = _logits(batch * W, vocab, gen)
        if family in TARGETS:  # set by check_against_semantics: the odd rows' given, the even rows' unset
            a["logit_tiles"] = torch.full((batch * W, -(-vocab // LOGIT_TILE)), -1, dtype=torch.int64)
        if family in (TARGET_SAMPLE_DENSE, TARGET_SAMPLE_DENSE_TILES):
            a["draft_dists"] = torch.softmax(torch.randn(W - 1, batch, vocab, generator=gen) * 3, -1)
        outs = {
            "target_tokens": (batch, W),
            "target_draft_probs": (batch, W - 1),
            "accept_uniforms": (batch, W - 1),
            "vocab_scratch": (batch * W, vocab),
        }
    from specgen.specializations import FAMILIES

    for name, shape in outs.items():
        dtype = getattr(torch, next(x.dtype for x in FAMILIES[family].args if x.name == name))
        a[name] = torch.full(shape, -7, dtype=dtype)
    rows = batch if family == DRAFT_SAMPLE else batch * W
    a["vocab_parts"] = torch.full((rows, chunks, 4), -7, dtype=torch.int64)  # no result: any contents
    a["vocab_sums"] = torch.zeros(rows, VOCAB_SUMS, dtype=torch.int64)  # zero on entry
    return {n: v.to(device) for n, v in a.items()}


FAMILIES_UNDER_TEST = (TARGET_SAMPLE, TARGET_SAMPLE_DENSE, DRAFT_SAMPLE, TARGET_SAMPLE_TILES, TARGET_SAMPLE_DENSE_TILES)


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
@pytest.mark.parametrize("vocab", EDGE_VOCABS)
def test_c_variant_equals_the_semantics_on_the_edges(sampling_kernels, family, vocab):
    """One block per row, and the row split into chunks: two, three (a vocabulary of 8193 tokens is 9 tiles:
    chunks of 3) and more chunks than tiles (chunks with no token); the workspace is zero again after each."""
    gen = torch.Generator().manual_seed(vocab)
    kernel = sampling_kernels.get(family, W, target="c")
    for batch, chunks in ((1, 1), (3, 1), (1, 3), (3, 2), (1, 12)):
        check_against_semantics(kernel, family, _args(family, batch, vocab, gen, "cpu", chunks=chunks))


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), vocab=st.integers(1, 5000), batch=st.integers(1, 4), chunks=st.integers(1, 6))
def test_c_variant_equals_the_semantics_on_random_rows(sampling_kernels, family, seed, vocab, batch, chunks):
    kernel = sampling_kernels.get(family, W, target="c")
    gen = torch.Generator().manual_seed(seed)
    check_against_semantics(kernel, family, _args(family, batch, vocab, gen, "cpu", chunks=chunks))


def _crowded_bin(family: str, vocab: int, spread: float, chunks: int, device) -> dict:
    """Top-p 0.5 over rows whose tokens share round 0's bin: every logit within ``spread`` of 0 (e of every token
    above 1 - 2**-10 at spread 0.0005), so that round 1 keeps every token of the row as a candidate."""
    gen = torch.Generator().manual_seed(vocab + chunks)
    args = _args(family, 2, vocab, gen, device, "nucleus", chunks=chunks)
    args["top_p"].fill_(0.5)
    name = "draft_logits" if family == DRAFT_SAMPLE else "logits"
    args[name].copy_((torch.rand(args[name].shape, generator=gen) * spread).to(device))
    return args


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_top_p_candidates_that_fit_and_that_do_not(sampling_kernels, family):
    """Top-p's round 2 reads the candidates that round 1 kept when they fit (CAND = 1536 per block) and the
    row again when they do not: 1500 tokens in one bin fit, 1537 and 8193 do not (one block per row), and three
    chunks of 8193 tokens (3072 tokens a block) do not either. With one block per row, round 2 then keeps the
    tokens of round 1's bin for round 3: at spread 0.0005 they fit, at 1e-7 (every token in one bin of round 1
    too) they do not and round 3 reads the row. Each equals the semantics."""
    kernel = sampling_kernels.get(family, W, target="c")
    for vocab, chunks in ((1500, 1), (1537, 1), (8193, 1), (8193, 3)):
        for spread in (0.0005, 0.05, 1e-7):
            check_against_semantics(kernel, family, _crowded_bin(family, vocab, spread, chunks, "cpu"))


def _light_tail(family: str, vocab: int, low: float, high: float, top_p: float, chunks: int, device) -> dict:
    """Temperature 1 over rows of one token at logit 0 and the rest uniform in ``[low, high]``: with ``top_p``
    near 1 the cut lands among the light weights, where ``E = floor(e * 2**40)`` is a small integer that many
    tokens share (``e`` below ``2**-17``) or crosses from there into the weights that are ``e * 2**40`` exactly."""
    gen = torch.Generator().manual_seed(vocab + chunks)
    args = _args(family, 2, vocab, gen, device, "nucleus", chunks=chunks)
    args["temperature"].fill_(1.0)
    args["top_p"].fill_(top_p)
    name = "draft_logits" if family == DRAFT_SAMPLE else "logits"
    x = low + torch.rand(args[name].shape, generator=gen) * (high - low)
    x[:, 0] = 0.0
    args[name].copy_(x.to(device))
    return args


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_top_p_cut_among_the_lightest_weights(sampling_kernels, family):
    """Top-p's key (the bits of ``float32(E)``) orders every weight as ``E`` does, the light ones that floor
    together and the ones across ``2**23`` too: the cut lands there and each row equals the semantics."""
    kernel = sampling_kernels.get(family, W, target="c")
    almost_one = float(torch.tensor(1.0) - torch.tensor(2.0**-24))  # the largest float32 below 1
    for low, high, top_p in ((-26.5, -23.5, almost_one), (-25.0, -14.0, almost_one), (-30.0, 0.0, 0.9999)):
        for vocab, chunks in ((5000, 1), (8193, 3)):
            check_against_semantics(kernel, family, _light_tail(family, vocab, low, high, top_p, chunks, "cpu"))


def _early_rows(
    family: str, vocab: int, heavy: int, top_p: float, chunks: int, device, light: int = -13, crowd: int = 0
) -> dict:
    """Temperature 1 over rows of one token at logit 0, ``heavy`` tokens of weight ``e`` in ``2**-10 * [1.05, 1.5]``
    (``E`` of ``2**30`` and up: the e pass keeps their keys as top-p's early candidates) and the rest in
    ``2**light * [1, 1.5]``, at random places; ``crowd`` of the heavy ones among the first chunk's tokens and the
    rest after them, so that the first block's candidates can overflow where the others' fit."""
    gen = torch.Generator().manual_seed(vocab + heavy + chunks)
    args = _args(family, 2, vocab, gen, device, "nucleus", chunks=chunks)
    args["temperature"].fill_(1.0)
    args["top_p"].fill_(top_p)
    name = "draft_logits" if family == DRAFT_SAMPLE else "logits"
    rows = args[name].shape[0]
    x = torch.log(2.0**light * (1 + 0.5 * torch.rand(rows, vocab, generator=gen)))
    first = math.ceil(math.ceil(vocab / 1024) / chunks) * 1024  # the first chunk's tokens: 0 .. first - 1
    for row in range(rows):
        at = torch.randperm(vocab - 1, generator=gen)[:heavy] + 1
        if crowd:
            ahead = torch.randperm(first - 1, generator=gen)[:crowd] + 1
            at = torch.cat([ahead, torch.randperm(vocab - first, generator=gen)[: heavy - crowd] + first])
        x[row, at] = torch.log(2.0**-10 * (1.05 + 0.45 * torch.rand(heavy, generator=gen)))
    x[:, 0] = 0.0
    args[name].copy_(x.to(device))
    return args


EARLY_CASES = (  # (vocab, heavy tokens, top_p, chunks, heavy ones in the first chunk)
    # the cut among the heavy ones, whose keys all fit: rounds 1.. read the early candidates, and the draw's tile
    # sums come from them (the early draw)
    (5000, 1000, 0.6, 1, 0),
    (5000, 1000, 0.6, 3, 0),
    (5000, 1000, 0.9, 1, 0),  # the cut among the light ones: round 1 reads the row, and so does the draw
    (5000, 1000, 0.9, 3, 0),
    (5000, 4000, 0.5, 1, 0),  # too many heavy ones for CAND: round 1 reads the row
    (5000, 4000, 0.5, 2, 0),
    (8193, 1600, 0.5, 3, 0),  # about 530 a block of three: they fit in each
    # 2000 in the first block's chunk (on cuda it reads its row again) and 300 in the others' (theirs fit)
    (8193, 2300, 0.5, 3, 2000),
)


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_top_p_early_candidates_and_their_fallbacks(sampling_kernels, family):
    """Top-p's rounds after the first read the keys the e pass kept (weights of ``2**30`` and up) where round 0's
    bin is among them and they all fit, else the row: each case equals the semantics."""
    kernel = sampling_kernels.get(family, W, target="c")
    for vocab, heavy, top_p, chunks, crowd in EARLY_CASES:
        args = _early_rows(family, vocab, heavy, top_p, chunks, "cpu", crowd=crowd)
        check_against_semantics(kernel, family, args)


def _bin_rows(family: str, vocab: int, top_p: float, chunks: int, device) -> dict:
    """Temperature 1 over two rows with one token at ``e = 1``: the first's other ``e`` spread log-uniformly over
    ``2**-42 .. 1`` (every bin of round 0 holds tokens), the second's a tail of ``e`` in ``[1.5, 4] * (1 - p) / V``
    (top-p's cut among them) with every tenth token at ``(1 - p) / (8 V)``, so light that the cut can never be one
    of them (a row's ``Z`` is at least 1: its largest logit's ``e``)."""
    gen = torch.Generator().manual_seed(vocab + chunks + int(top_p * 1e6))
    args = _args(family, 2, vocab, gen, device, "nucleus", chunks=chunks)
    args["temperature"].fill_(1.0)
    args["top_p"].fill_(top_p)
    name = "draft_logits" if family == DRAFT_SAMPLE else "logits"
    rows = args[name].shape[0]
    x = -42 * torch.rand(rows, vocab, generator=gen) * math.log(2.0)
    tail = (1 - top_p) / vocab * (1.5 + 2.5 * torch.rand(rows, vocab, generator=gen, dtype=torch.float64))
    tail[:, ::10] = (1 - top_p) / (8 * vocab)
    x[rows // 2 :] = torch.log(tail[rows // 2 :]).float()
    x[:, 0] = 0.0
    args[name].copy_(x.to(device))
    return args


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_top_p_cuts_over_every_bin_of_round_0(sampling_kernels, family):
    """Top-p's cut from the heaviest tokens (p = 1e-3) to the lightest (p = 1 - 2**-20) over rows whose tokens fill
    every bin of round 0, and cuts among a tail of light tokens, each equal to the semantics with one block per
    row and with three."""
    kernel = sampling_kernels.get(family, W, target="c")
    for top_p in (1e-3, 0.5, 0.99, 0.999, 1 - 2**-20):
        for chunks in (1, 3):
            check_against_semantics(kernel, family, _bin_rows(family, 4000, top_p, chunks, "cpu"))


def _greedy_far(family: str, vocab: int, chunks: int, device) -> dict:
    """Greedy rows whose argmax is the last token (the last chunk's tiles) and whose drafts are that token: the
    outputs the first chunk writes (``target_draft_probs``, ``sampled_probs``) are 1, never a value read from
    tiles another block writes."""
    gen = torch.Generator().manual_seed(vocab + chunks)
    args = _args(family, 2, vocab, gen, device, "nucleus", chunks=chunks)
    args["temperature"].zero_()
    name = "draft_logits" if family == DRAFT_SAMPLE else "logits"
    x = torch.rand(args[name].shape, generator=gen)
    x[:, -1] = 2.0
    args[name].copy_(x.to(device))
    if family != DRAFT_SAMPLE:
        args["draft_tokens"].fill_(vocab - 1)
    return args


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_greedy_rows_over_chunks_write_their_one_hot_probabilities(sampling_kernels, family):
    kernel = sampling_kernels.get(family, W, target="c")
    for vocab, chunks in ((8193, 3), (5000, 5)):
        args = _greedy_far(family, vocab, chunks, "cpu")
        check_against_semantics(kernel, family, args)
        probs = args["sampled_probs"] if family == DRAFT_SAMPLE else args["target_draft_probs"]
        assert (probs == 1).all()


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_temperatures_at_the_float_edges(sampling_kernels, family):
    """The largest scaled logit, and top-k's k-th largest, are those of the raw logits divided by t (a correctly
    rounded quotient keeps the order): a t so small that quotients overflow, a subnormal t, and t = +inf (each
    quotient divided: an infinite logit's is NaN), over rows with infinite, signed-zero and NaN logits; each
    equals the semantics."""
    kernel = sampling_kernels.get(family, W, target="c")
    for t in (1e-38, 1e-45, 3e38, float("inf")):
        for chunks in (1, 3):
            gen = torch.Generator().manual_seed(chunks)
            args = _args(family, 2, 3000, gen, "cpu", "nucleus", chunks=chunks)
            args["temperature"].fill_(t)
            args["top_k"][1] = 7  # the second sequence's rows keep the 7 largest too: the k-th over raw logits
            name = "draft_logits" if family == DRAFT_SAMPLE else "logits"
            x = args[name]
            x[:, 5], x[:, 6], x[:, 7], x[:, 8] = float("inf"), float("-inf"), -0.0, float("nan")
            x[0] = 0.0
            x[0, 9] = -0.0  # a row of signed zeros: the largest is either, and the weights do not tell
            check_against_semantics(kernel, family, args)


OUTPUTS = ("target_tokens", "target_draft_probs", "accept_uniforms")


def _lying_tiles(args: dict, shift: float) -> torch.Tensor:
    """Every row's true tiles with each tile's largest logit raised by ``shift``."""
    give_tiles(args, slice(None))
    tiles = args["logit_tiles"].cpu()
    top = (tiles & 0xFFFFFFFF).to(torch.int32).view(torch.float32) + shift
    return ((tiles >> 32) << 32) | (top.view(torch.int32).to(torch.int64) & 0xFFFFFFFF)


def check_given_tiles(kernel, family: str, device) -> None:
    """Rows given their true tiles equal the semantics; rows whose tiles claim a larger logit than the row holds
    sample from weights scaled by another largest logit, so that their outputs differ, while a greedy row (which
    reads its row for the argmax) and rows whose tiles are unset keep the semantics' outputs."""
    gen = torch.Generator().manual_seed(11)
    for vocab, batch, chunks in ((3000, 3, 1), (3000, 3, 3), (8193, 3, 2)):
        args = _args(family, batch, vocab, gen, device, "nucleus", chunks=chunks)
        args["temperature"][0] = 0.0  # sequence 0: greedy
        args["logits"].copy_(torch.randn(batch * W, vocab, generator=gen) * 1.5)  # top-p keeps many tokens
        top = args["logits"].nan_to_num(nan=float("-inf")).argmax(-1).view(batch, W)
        args["draft_tokens"].copy_(top[:, : W - 1])  # each draft the row's top token: p(x) > 0, as sure as it gets
        give_tiles(args, slice(None))
        check_against_semantics(kernel, family, args, tiles=False)
        want = {n: args[n].clone() for n in OUTPUTS}
        lie = _lying_tiles(args, 12.0).to(device)  # E = floor(e * 2**40) of e below 4e-8: coarse weights
        lie[-W:, 0] = -1  # the last sequence's rows unset: they read their rows
        args["logit_tiles"] = lie
        kernel(*(args[a.name] for a in FAMILIES[family].args))
        for n in OUTPUTS:
            same = (args[n].view(torch.int32) if args[n].is_floating_point() else args[n]) == (
                want[n].view(torch.int32) if want[n].is_floating_point() else want[n]
            )
            assert same[0].all() and same[-1].all(), (n, same)  # greedy, and unset tiles
        probs = args["target_draft_probs"].view(torch.int32) != want["target_draft_probs"].view(torch.int32)
        assert probs[1 : batch - 1].any(), (vocab, chunks)  # the rows given the lying tiles took m from them
        assert ((args["target_tokens"] >= 0) & (args["target_tokens"] < vocab)).all()
        assert not args["vocab_sums"].any()
        check_wild_tiles(kernel, family, args)


def check_wild_tiles(kernel, family: str, args: dict) -> None:
    """Tiles that claim a largest logit below the row's (its tokens above it weigh as much as the largest), or
    +-inf, or counts past the row: the kernel reads and writes only its arguments (memcheck on the GPU), its
    tokens stay in the vocabulary, p(x) in [0, 1], and the workspace comes back zero."""
    vocab = args["logits"].shape[1]
    true = logit_tiles_of(args["logits"].cpu())
    inf = torch.tensor(float("inf")).view(torch.int32).to(torch.int64)
    for lie in (
        _lying_tiles(args, -12.0),
        (true >> 32 << 32) | inf,
        (true >> 32 << 32) | ((-torch.tensor(float("inf"))).view(torch.int32).to(torch.int64) & 0xFFFFFFFF),
        (true & 0xFFFFFFFF) | (torch.tensor(2**31 - 1) << 32),
    ):
        args["logit_tiles"] = lie.to(args["logits"].device)
        kernel(*(args[a.name] for a in FAMILIES[family].args))
        assert ((args["target_tokens"] >= 0) & (args["target_tokens"] < vocab)).all()
        probs = args["target_draft_probs"]
        assert ((probs >= 0) & (probs <= 1)).all(), probs
        assert not args["vocab_sums"].any()


@pytest.mark.parametrize("family", TARGETS)
def test_given_logit_tiles_stand_for_the_largest_logit(sampling_kernels, family):
    """The target families take a row's largest logit from its tiles where they are set (``logit_tiles``)."""
    check_given_tiles(sampling_kernels.get(family, W, target="c"), family, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("family", TARGETS)
def test_cuda_given_logit_tiles_stand_for_the_largest_logit(sampling_kernels, family):
    check_given_tiles(sampling_kernels.get(family, W, target="cuda"), family, "cuda")


def test_a_vocabulary_past_the_tiles_is_left_alone(sampling_kernels):
    """Past ``MAX_VOCAB_TOKENS`` the kernel writes nothing (the engine refuses such a model up front)."""
    gen = torch.Generator().manual_seed(0)
    args = _args(DRAFT_SAMPLE, 1, MAX_VOCAB_TOKENS + 1, gen, "cpu")
    sampling_kernels.get(DRAFT_SAMPLE, W, target="c")(*args.values())
    assert (args["sampled_tokens"] == -7).all() and (args["draft_dist"] == -7).all()


@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_cuda_shared_sums_take_32_bit_atomics_and_the_trees_fold_by_shuffles(family):
    """sm_90 compiles a 64-bit shared atomic add to a compare-and-swap loop: the cuda source adds the block's
    sums (histogram, tile sums) as uint32 halves, and the only 64-bit shared array it adds into atomically is
    the candidate keys' (one add a slot). The max and argmax trees are warp shuffles, not ten-step trees."""
    text = render_variant(VariantSpec(family, W), "cuda")
    shared = dict(re.findall(r'(\w+) = T\.alloc_shared\(\([^)]*\), "(\w+)"', text))
    added = set(re.findall(r"T\.atomic_add\((\w+)\[", text))
    added |= set(re.findall(r'"atomicAdd", T\.address_of\((\w+)\[', text))
    assert {a for a in added if a in shared and shared[a].endswith("64")} == {"cand"}
    assert {a for a in added if a in shared} == {"hist_lo", "hist_hi", "tiles_lo", "tiles_hi", "si", "cand"}
    assert all(shared[a] == "uint32" for a in ("hist_lo", "hist_hi", "tiles_lo", "tiles_hi"))
    assert "hist =" not in text and "T.shift_right(512" not in text and text.count("T.shfl_xor") >= 2 * 5 * 4
    c = render_variant(VariantSpec(family, W), "c")  # the c target: plain adds, the same split arrays
    assert "T.atomic_add" not in c and "atomicAdd" not in c and "hist_lo" in c


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_cuda_variant_equals_the_semantics(sampling_kernels, family):
    kernel = sampling_kernels.get(family, W, target="cuda")
    gen = torch.Generator().manual_seed(1)
    for vocab in (*EDGE_VOCABS, 5000, 151936):
        for batch in (1, 3, 32):
            if vocab == 151936 and batch == 32 and family != DRAFT_SAMPLE:
                batch = 8
            rows = batch if family == DRAFT_SAMPLE else batch * W
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            # what the engine picks, and 1 and 2 where the row's blocks all fit at once (the launcher refuses more)
            for chunks in sorted(c for c in {1, 2, vocab_chunks(rows, vocab, sms)} if c == 1 or rows * c <= sms):
                args = _args(family, batch, vocab, gen, "cuda", chunks=chunks)
                check_against_semantics(kernel, family, args)
                check_against_semantics(
                    kernel, family, args
                )  # the workspace is zero again: a second launch is the same
    rows = 2 if family == DRAFT_SAMPLE else 2 * W  # _crowded_bin's two sequences
    most = vocab_chunks(rows, 151936, torch.cuda.get_device_properties(0).multi_processor_count)
    for vocab, chunks in ((1500, 1), (1537, 1), (8193, 1), (8193, 3), (151936, 1), (151936, most)):
        for spread in (0.0005, 1e-7):  # round 2's candidates fit for round 3, and do not
            check_against_semantics(kernel, family, _crowded_bin(family, vocab, spread, chunks, "cuda"))
    for vocab, chunks in ((8193, 3), (151936, most)):  # the first chunk writes a greedy row's outputs
        args = _greedy_far(family, vocab, chunks, "cuda")
        check_against_semantics(kernel, family, args)
        assert ((args["sampled_probs"] if family == DRAFT_SAMPLE else args["target_draft_probs"]) == 1).all()
    for chunks in (1, vocab_chunks(32 * W, 151936, 132), vocab_chunks(W, 151936, 132)):
        check_against_semantics(
            kernel, family, _args(family, 32 if chunks < 8 else 1, 151936, gen, "cuda", "nucleus", chunks)
        )


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_cuda_top_p_early_candidates_and_their_fallbacks(sampling_kernels, family):
    """The early candidates on the GPU, where a warp's lanes take their slots together and stop at a count past
    CAND: the cases of the c test, then the Qwen3 vocabulary with its light tokens at ``2**-20`` (the cut at the top
    token, among the heavy ones, among the light ones, and among more heavy ones than one block keeps), with one
    block per row and with the engine's blocks per row; then rows whose blocks gather the row's candidates, or just
    do not."""
    kernel = sampling_kernels.get(family, W, target="cuda")
    for vocab, heavy, top_p, chunks, crowd in EARLY_CASES:
        args = _early_rows(family, vocab, heavy, top_p, chunks, "cuda", crowd=crowd)
        check_against_semantics(kernel, family, args)
    rows = 2 if family == DRAFT_SAMPLE else 2 * W
    most = vocab_chunks(rows, 151936, torch.cuda.get_device_properties(0).multi_processor_count)
    for heavy, top_p in ((100, 0.6), (1000, 0.6), (1000, 0.99), (3000, 0.5)):
        for chunks in (1, most):
            args = _early_rows(family, 151936, heavy, top_p, chunks, "cuda", light=-20)
            check_against_semantics(kernel, family, args)
    # the row's early candidates gathered by every block (1023 heavy tokens and token 0: GATHER of them) and one
    # too many, each also with top-k on, whose digit 0 shares the gathered list's place in vocab_sums
    for heavy in (1023, 1024):
        for chunks, top_k in ((3, 0), (most, 0), (most, 4000)):
            args = _early_rows(family, 151936 if chunks == most else 8193, heavy, 0.6, chunks, "cuda", light=-20)
            args["top_k"].fill_(top_k)
            check_against_semantics(kernel, family, args)


@pytest.mark.gpu
@pytest.mark.parametrize("family", FAMILIES_UNDER_TEST)
def test_cuda_top_p_cuts_over_every_bin_of_round_0(sampling_kernels, family):
    """Top-p's cuts over every bin of round 0 on the GPU: the c test's rows at 4000 tokens and over the Qwen3
    vocabulary, with one block per row, three, and the engine's blocks per row."""
    kernel = sampling_kernels.get(family, W, target="cuda")
    rows = 2 if family == DRAFT_SAMPLE else 2 * W
    most = vocab_chunks(rows, 151936, torch.cuda.get_device_properties(0).multi_processor_count)
    for top_p in (1e-3, 0.5, 0.99, 0.999, 1 - 2**-20):
        for vocab, chunks in ((4000, 1), (4000, 3), (151936, 1), (151936, most)):
            check_against_semantics(kernel, family, _bin_rows(family, vocab, top_p, chunks, "cuda"))
