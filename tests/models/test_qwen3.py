"""The Qwen3-style test model, its MTP head and paged attention."""

from __future__ import annotations

import functools
import json

import pytest
import torch

from specgen.models import (
    AttentionBatch,
    BlockAllocator,
    ModelConfig,
    MTPHead,
    PagedKVCache,
    Qwen3Model,
    make_block_table,
    slot,
    verify_metadata,
)

BS = 8


@functools.cache
def tiny() -> tuple[Qwen3Model, MTPHead]:
    model = Qwen3Model.create("tiny", seed=0)
    return model, MTPHead.create(model, seed=1)


def run_rows(model, bt, rows: list[list[int]], starts: list[int]):
    """One forward over equal-length rows, sequence b at positions ``starts[b] + i``."""
    r = len(rows[0])
    pos = torch.tensor(starts)[:, None] + torch.arange(r)
    slots = slot(bt, pos, BS)
    qsl = torch.arange(len(rows) + 1) * r
    _, logits = model(torch.tensor(rows).reshape(-1), pos.reshape(-1), slots.reshape(-1), bt, pos[:, -1] + 1, qsl, r)
    return logits.view(len(rows), r, -1)


def test_presets():
    cfg = ModelConfig.preset("qwen3-0.6b")
    assert (
        cfg.num_layers,
        cfg.hidden_size,
        cfg.num_heads,
        cfg.num_kv_heads,
        cfg.head_dim,
        cfg.intermediate_size,
        cfg.vocab_size,
    ) == (28, 1024, 16, 8, 128, 3072, 151936)
    assert cfg.tie_embeddings and cfg.rms_eps == 1e-6 and cfg.rope_theta == 1e6
    model = Qwen3Model.create(cfg, device="meta")
    non_embed = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n)
    assert 0.43e9 < non_embed < 0.45e9  # Qwen3-0.6B: 0.44B non-embedding parameters


def test_slots_and_masked_writes():
    bt = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32)
    pos = torch.tensor([[0, 9, 16, -1], [7, 8, 15, 100]])
    assert slot(bt, pos, BS).tolist() == [[24, 1, -1, -1], [15, 16, 23, -1]]
    cache = PagedKVCache(1, 4, BS, 2, 4)
    cache.write(0, torch.tensor([5, -1, -1]), torch.ones(3, 2, 4), torch.ones(3, 2, 4))
    assert cache.k[0].shape == (4, BS, 2, 4)
    assert cache.k[0].sum() == 8 and cache.k[0][0, 5].eq(1).all()


def test_paged_attention_matches_dense():
    torch.manual_seed(0)
    lens, rows, heads, kvh, d = [5, 19, 33], 4, 4, 2, 16
    bt = make_block_table(BlockAllocator(3 * 5, seed=3), 3, 5)
    cache = PagedKVCache(1, 15, BS, kvh, d)
    ks = [torch.randn(n, kvh, d) for n in lens]
    vs = [torch.randn(n, kvh, d) for n in lens]
    for b, n in enumerate(lens):  # context before the query rows, written ahead
        cache.write(0, slot(bt[b : b + 1], torch.arange(n - rows)[None], BS)[0], ks[b][: n - rows], vs[b][: n - rows])
    pos = torch.stack([torch.arange(n - rows, n) for n in lens])
    q = torch.randn(3 * rows, heads, d)
    batch = AttentionBatch.build(
        pos.reshape(-1), slot(bt, pos, BS).reshape(-1), bt, torch.tensor(lens), torch.arange(4) * rows, rows, d, 1e6
    )
    out = batch.attend(cache, 0, q, torch.cat([k[-rows:] for k in ks]), torch.cat([v[-rows:] for v in vs]))
    for b, n in enumerate(lens):
        for i in range(rows):
            p = n - rows + i
            k = ks[b][: p + 1].repeat_interleave(heads // kvh, 1)
            v = vs[b][: p + 1].repeat_interleave(heads // kvh, 1)
            w = torch.softmax(torch.einsum("hd,lhd->hl", q[b * rows + i], k) * d**-0.5, -1)
            torch.testing.assert_close(out[b * rows + i], torch.einsum("hl,lhd->hd", w, v))


def test_prefill_then_decode_matches_full_forward():
    model = tiny()[0]
    g = torch.Generator().manual_seed(7)
    seqs = torch.randint(0, 512, (3, 24), generator=g).tolist()
    bt = make_block_table(BlockAllocator(12, seed=1), 3, 4)
    model.allocate_kv_cache(12, BS)
    full = run_rows(model, bt, seqs, [0, 0, 0])
    model.allocate_kv_cache(12, BS)
    parts = [run_rows(model, bt, [s[:10] for s in seqs], [0, 0, 0])]
    parts.append(run_rows(model, bt, [s[10:13] for s in seqs], [10, 10, 10]))  # W = 3 rows
    parts += [run_rows(model, bt, [s[i : i + 1] for s in seqs], [i] * 3) for i in range(13, 24)]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-4, rtol=1e-4)


def test_hf_state_dict_and_config(tmp_path):
    src = Qwen3Model.create("tiny", seed=0)
    dst = Qwen3Model.create("tiny", seed=5)
    hf = {f"model.{k}": v.clone() for k, v in src.named_parameters()}
    hf["lm_head.weight"] = src.embed_tokens.weight.clone()  # tied: ignored
    dst.load_hf_state_dict(hf)
    for (name, a), b in zip(src.named_parameters(), dst.parameters()):
        assert torch.equal(a, b), name
    del hf["model.layers.1.self_attn.k_norm.weight"]
    with pytest.raises(KeyError, match="k_norm"):
        dst.load_hf_state_dict(hf)
    cfg = {
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "vocab_size": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1e6,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    loaded = ModelConfig.from_hf(tmp_path)
    assert loaded.num_layers == 2 and loaded.head_dim == 16 and loaded.vocab_size == 512


def test_load_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    src = Qwen3Model.create("tiny", seed=0)
    st.save_file({f"model.{k}": v.contiguous() for k, v in src.named_parameters()}, str(tmp_path / "model.safetensors"))
    dst = Qwen3Model.create("tiny", seed=5)
    dst.load_safetensors(tmp_path)
    assert torch.equal(dst.layers[1].mlp.down_proj.weight, src.layers[1].mlp.down_proj.weight)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_verify_forward_captures_in_cuda_graph(dtype):
    b, w, bt_width, dev = 4, 4, 6, "cuda"
    model = Qwen3Model.create("tiny", seed=0, dtype=dtype, device=dev)
    head = MTPHead.create(model)
    bt = make_block_table(BlockAllocator(b * bt_width, seed=2), b, bt_width, dev)
    model.allocate_kv_cache(b * bt_width, BS)
    head.allocate_kv_cache(b * bt_width, BS)
    tokens = torch.randint(0, 512, (b * w,), device=dev, dtype=torch.int32)
    meta = verify_metadata(torch.tensor([3, 10, 17, 25], device=dev), bt, w, BS)

    def step():  # persistent buffers only: tokens, meta, bt
        hidden, logits = model(tokens, *meta[:2], bt, *meta[2:], w)
        _, draft_logits = head(tokens, *meta[:2], hidden, bt, *meta[2:], w)
        return logits, draft_logits

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda.set_sync_debug_mode("error")  # any host sync in the forward raises
    try:
        with torch.cuda.stream(side):
            step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    tokens.copy_(torch.randint(0, 512, (b * w,), device=dev, dtype=torch.int32))
    for buf, new in zip(meta, verify_metadata(torch.tensor([0, 7, 30, 12], device=dev), bt, w, BS)):
        buf.copy_(new)
    graph.replay()
    expected = step()
    for got, want in zip(captured, expected):
        torch.testing.assert_close(got, want)


def test_on_taps_sees_the_taps_before_the_later_layers_and_the_lm_head():
    """``on_taps`` is called once, with the very tensor the forward returns as its taps, when the last tapped layer
    has run: before the later layers and the LM head (work that reads only the taps can start beside them)."""
    model = Qwen3Model.create("tiny", seed=0)
    model.allocate_kv_cache(8, BS)
    bt = make_block_table(BlockAllocator(8, seed=1), 1, 2)
    rows, starts = [[5, 9, 11, 3]], [0]
    pos = torch.tensor(starts)[:, None] + torch.arange(4)
    args = (torch.tensor(rows).reshape(-1), pos.reshape(-1), slot(bt, pos, BS).reshape(-1), bt, pos[:, -1] + 1)
    qsl, taps = torch.tensor([0, 4]), (0,)
    assert len(model.layers) >= 2
    order, seen = [], []
    layers = model.layers
    for i, layer in enumerate(layers):
        layer.register_forward_hook(lambda *_, i=i: order.append(f"layer{i}"))
    lm = model.project
    model.project = lambda h, **kw: (order.append("lm_head"), lm(h, **kw))[1]  # the fast forward passes fast=True
    try:
        hidden, logits, tapped = model(
            *args, qsl, 4, taps=taps, on_taps=lambda t: (order.append("taps"), seen.append(t))
        )
    finally:
        del model.project
    assert len(seen) == 1 and seen[0] is tapped and tapped.shape == (4, len(taps) * model.config.hidden_size)
    assert order.index("taps") == order.index("layer0") + 1 < order.index("layer1") < order.index("lm_head")
    model.allocate_kv_cache(8, BS)  # the same forward without the callback: the same outputs
    again = model(*args, qsl, 4, taps=taps)
    assert all(torch.equal(a, b) for a, b in zip(again, (hidden, logits, tapped)))
