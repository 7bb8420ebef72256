"""``DraftVocab``: the MTP head's LM head over a subset of the target's ids (a reduced draft vocabulary).

The head's logits over the subset are the whole head's logits at those ids; an argmax index maps back to its
token id (the lowest id on ties, as over the whole row); widened logits are ``-inf`` outside the subset, and a
sampling draft's draw over the subset is the draw over the widened row, bit for bit; bad subsets and
``--draft-vocab`` texts are refused with a message naming what is wrong."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.models import Qwen3Model
from specgen.models.draft_vocab import DraftVocab, parse_draft_vocab
from specgen.models.qwen3_5 import Qwen35Model
from specgen.runtime.sampling import SamplingParams, SamplingTensors, draft_sample

V, H = 40, 8


@pytest.fixture
def weight():
    return torch.randn(V, H, generator=torch.Generator().manual_seed(0))


def test_the_first_ids_are_a_view_of_the_weight(weight):
    vocab = DraftVocab(weight, 12)
    assert vocab.size == 12 and vocab.ids is None and vocab.weight.data_ptr() == weight.data_ptr()
    index = torch.tensor([0, 11, 5])
    assert torch.equal(vocab.tokens(index), index)
    assert DraftVocab(weight, list(range(7))).ids is None  # 0 .. N-1 listed: the same view


def test_listed_ids_gather_their_rows_in_id_order_and_map_back(weight):
    ids = torch.randperm(V, generator=torch.Generator().manual_seed(1))[:9].sort().values
    vocab = DraftVocab(weight, ids.flip(0).tolist())  # any listed order: kept in id order
    assert torch.equal(vocab.ids, ids) and torch.equal(vocab.weight, weight[ids]) and vocab.weight.is_contiguous()
    h = torch.randn(3, H)
    full, reduced = h @ weight.T, h @ vocab.weight.T
    assert torch.equal(vocab.tokens(reduced.argmax(-1)), ids[reduced.argmax(-1)])
    assert torch.equal(vocab.tokens(reduced.argmax(-1)), ids[full[:, ids].argmax(-1)])
    wide = vocab.widen(reduced)
    outside = torch.ones(V, dtype=torch.bool)
    outside[ids] = False
    assert wide.shape == (3, V) and torch.equal(wide[:, ids], reduced)
    assert torch.isneginf(wide[:, outside]).all()
    torch.testing.assert_close(torch.softmax(wide, -1)[:, ids], torch.softmax(reduced, -1))


def test_a_tie_maps_to_the_lowest_id_as_over_the_whole_row(weight):
    vocab = DraftVocab(weight, [30, 4, 17])
    reduced = torch.tensor([[1.0, 1.0, 0.0], [0.0, 2.0, 2.0]])  # ids 4, 17, 30
    assert vocab.tokens(reduced.argmax(-1)).tolist() == vocab.widen(reduced).argmax(-1).tolist() == [4, 17]


@pytest.mark.parametrize("keep", [6, [33, 2, 19, 7]])
def test_scatter_writes_the_subset_columns_alone(weight, keep):
    vocab = DraftVocab(weight, keep)
    rows = torch.rand(2, vocab.size)
    out = torch.full((2, V), 7.0)
    vocab.scatter(out, rows)
    cols = torch.arange(vocab.size) if vocab.ids is None else vocab.ids
    inside = torch.zeros(V, dtype=torch.bool)
    inside[cols] = True
    assert torch.equal(out[:, cols], rows) and (out[:, ~inside] == 7.0).all()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, V),
    listed=st.booleans(),
    temperature=st.sampled_from([0.0, 0.7, 1.0, 2.5]),
    top_k=st.sampled_from([0, 1, 3, 8, V - 1, V]),
    top_p=st.sampled_from([1.0, 0.95, 0.5, 0.1]),
    levels=st.sampled_from([3, 64]),
    seed=st.integers(0, 2**31),
)
def test_a_draw_over_the_subset_is_the_draw_over_the_widened_row(n, listed, temperature, top_k, top_p, levels, seed):
    """``draft_sample`` over the reduced logits, mapped back, equals it over the widened row: the token, ``q(x)`` and
    ``q`` (0 outside the subset), ties included (``levels`` distinct logit values), top-k past the subset's size."""
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(V, H, generator=gen)
    vocab = DraftVocab(weight, torch.randperm(V, generator=gen)[:n].tolist() if listed else n)
    reduced = torch.randint(0, levels, (4, vocab.size), generator=gen).float() * (8.0 / levels)
    params = [SamplingParams(temperature, top_k, top_p, seed + r) for r in range(3)] + [SamplingParams(0.0)]
    t = SamplingTensors.of(params)
    bufs = {"temperature": t.temperature, "top_k": t.top_k, "top_p": t.top_p, "seed": t.seed}
    positions = torch.arange(4) + seed % 1000
    x, qx, q = draft_sample(reduced, bufs, positions)
    wx, wqx, wq = draft_sample(vocab.widen(reduced), bufs, positions)
    assert torch.equal(vocab.tokens(x), wx) and torch.equal(qx, wqx)
    assert torch.equal(vocab.scatter(torch.zeros(4, V), q), wq)


def test_a_prefix_widens_with_minus_infinity_past_it(weight):
    vocab = DraftVocab(weight, 5)
    wide = vocab.widen(torch.randn(2, 5))
    assert torch.isfinite(wide[:, :5]).all() and torch.isneginf(wide[:, 5:]).all()


@pytest.mark.parametrize(
    "keep, message",
    [
        (0, "keeps 1 to 40 ids"),
        (41, "keeps 1 to 40 ids"),
        ([], "non-empty list of integers"),
        ([1.5, 2.0], "non-empty list of integers"),
        ([3, 40], "id 40 lies outside"),
        ([-1, 2], "id -1 lies outside"),
        ([4, 2, 4], "repeats"),
    ],
)
def test_a_bad_subset_is_refused(weight, keep, message):
    with pytest.raises(ValueError, match=message):
        DraftVocab(weight, keep)


def test_the_option_reads_a_count_or_a_json_file(tmp_path):
    assert parse_draft_vocab("32768") == 32768
    listed, wrapped = tmp_path / "ids.json", tmp_path / "wrapped.json"
    listed.write_text(json.dumps([5, 1, 9]))
    wrapped.write_text(json.dumps({"ids": [2, 3]}))
    assert parse_draft_vocab(str(listed)) == [5, 1, 9] and parse_draft_vocab(str(wrapped)) == [2, 3]
    with pytest.raises(ValueError, match="no file"):
        parse_draft_vocab(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text("[1, 2")
    with pytest.raises(ValueError, match="is not JSON"):
        parse_draft_vocab(str(tmp_path / "bad.json"))
    for body in ('{"top": [1]}', "[1, 2.5]", "[true]", "[]"):
        (tmp_path / "odd.json").write_text(body)
        with pytest.raises(ValueError, match="no list of integer token ids"):
            parse_draft_vocab(str(tmp_path / "odd.json"))


@pytest.mark.parametrize("target", ["qwen3", "qwen3.5"])
def test_the_heads_logits_over_the_subset_are_the_whole_heads_at_those_ids(target):
    model = Qwen3Model.create("tiny", seed=0) if target == "qwen3" else Qwen35Model.create("qwen3.5-tiny", seed=0)
    head = DRAFT_KINDS["mtp"].create(model, seed=1)
    bs, n = 16, 3
    head.allocate_kv_cache(4, bs)
    args = (
        torch.tensor([3, 7, 11]),  # tokens
        torch.tensor([1, 2, 3]),  # positions
        torch.tensor([1, 2, 3]),  # slots
        torch.zeros(1, 4, dtype=torch.int32),  # block table
        torch.tensor([4]),  # kv lens
        torch.tensor([0, n]),  # query start loc
    )
    hidden = torch.randn(n, model.config.hidden_size, generator=torch.Generator().manual_seed(2))
    _, full = head(*args[:3], hidden, *args[3:], n)
    ids = torch.randperm(model.config.vocab_size, generator=torch.Generator().manual_seed(3))[:50].sort().values
    head.draft_vocab = DraftVocab(model.lm_head_weight, ids.tolist())
    _, reduced = head(*args[:3], hidden, *args[3:], n)
    assert reduced.shape == (n, 50)
    torch.testing.assert_close(reduced, full[:, ids])
    assert torch.equal(head.draft_vocab.tokens(reduced.argmax(-1)), ids[full[:, ids].argmax(-1)])
