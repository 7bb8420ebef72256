"""The Qwen3.5-style hybrid target: its forward against a plain from-scratch reference and against
transformers' Qwen3.5, the linear state's slot contract, presets and the Hugging Face loader."""

from __future__ import annotations

import copy
import functools
import json

import pytest
import torch
import torch.nn.functional as F
from oracles.hf_qwen3_5 import hf_text_config

from specgen.models import BlockAllocator, make_block_table, slot
from specgen.models.checkpoint import save_file
from specgen.models.qwen3_5 import Qwen35Config, Qwen35Model

BS = 8
# float32 rounding moves the tiny model's logits (up to ~17) by ~3e-5 (its preset says why so little)
TOL = {"atol": 2e-4, "rtol": 1e-5}


@functools.cache
def tiny() -> Qwen35Model:
    return Qwen35Model.create("qwen3.5-tiny", seed=0)


def fresh(model: Qwen35Model, seqs: int, slots: int, blocks_per_seq: int = 4):
    """A zeroed KV cache and state pool; the block table."""
    model.allocate_kv_cache(seqs * blocks_per_seq, BS)
    model.allocate_linear_state(slots)
    return make_block_table(BlockAllocator(seqs * blocks_per_seq, seed=1), seqs, blocks_per_seq)


def forward(model, bt, rows: list[list[int]], starts: list[int], read: list[int], write: list[list[int]]):
    """One forward over ragged rows padded to the longest, sequence b at positions ``starts[b] + i``;
    ``write[b][i]`` is the slot of the state after row i (missing: -1).  Each sequence's real rows' logits."""
    b, r = len(rows), max(len(x) for x in rows)
    idx = torch.arange(r)
    lens = torch.tensor([len(x) for x in rows])
    pos = torch.tensor(starts)[:, None] + idx
    slots = torch.where(idx < lens[:, None], slot(bt, pos, BS), torch.full_like(pos, -1))
    tokens = torch.tensor([x + [0] * (r - len(x)) for x in rows])
    writes = torch.tensor([w + [-1] * (r - len(w)) for w in write])
    _, logits = model(
        tokens.reshape(-1),
        pos.reshape(-1),
        slots.reshape(-1),
        bt,
        torch.tensor(starts) + lens,
        torch.arange(b + 1) * r,
        r,
        state_read=torch.tensor(read),
        state_write=writes.reshape(-1),
    )
    return [logits.view(b, r, -1)[i, : len(x)] for i, x in enumerate(rows)]


def last_only(rows: list[list[int]], slots: list[int]) -> list[list[int]]:
    """A prefill's writes: the state after the last row only."""
    return [[-1] * (len(x) - 1) + [s] for x, s in zip(rows, slots)]


# --- the plain reference: every token from scratch, dense, one head at a time ---------------------------


EPS = Qwen35Config.preset("qwen3.5-tiny").rms_eps


def _rms(x, gain, eps=EPS):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def _l2(x, eps=1e-6):
    return x / (x @ x + eps).sqrt()


def _ref_linear(m, x):
    t, c = x.shape[0], m.conv_dim
    qkv = torch.cat([x.new_zeros(m.kernel - 1, c), x @ m.in_proj_qkv.weight.T])
    w = m.conv1d.weight.view(c, m.kernel)
    mixed = F.silu(torch.stack([(qkv[i : i + m.kernel].T * w).sum(-1) for i in range(t)]))
    qk = m.key_heads * m.key_dim
    q, k, v = mixed[:, :qk], mixed[:, qk : 2 * qk], mixed[:, 2 * qk :]
    g = -m.A_log.exp() * F.softplus(x @ m.in_proj_a.weight.T + m.dt_bias)
    beta = torch.sigmoid(x @ m.in_proj_b.weight.T)
    out = x.new_zeros(t, m.value_heads, m.value_dim)
    for h in range(m.value_heads):
        kh = h // (m.value_heads // m.key_heads)
        s = x.new_zeros(m.key_dim, m.value_dim)
        for i in range(t):
            kk = _l2(k[i, kh * m.key_dim : (kh + 1) * m.key_dim])
            qq = _l2(q[i, kh * m.key_dim : (kh + 1) * m.key_dim]) / m.key_dim**0.5
            vv = v[i, h * m.value_dim : (h + 1) * m.value_dim]
            s = s * g[i, h].exp()
            s = s + beta[i, h] * torch.outer(kk, vv - s.T @ kk)
            out[i, h] = s.T @ qq
    z = (x @ m.in_proj_z.weight.T).view(t, m.value_heads, m.value_dim)
    return (_rms(out, m.norm.weight) * F.silu(z)).reshape(t, -1) @ m.out_proj.weight.T


def _ref_attention(a, x, cfg):
    t, d, rd = x.shape[0], cfg.head_dim, cfg.rotary_dim
    qg = (x @ a.q_proj.weight.T).view(t, a.num_heads, 2 * d)
    q, gate = _rms(qg[..., :d], 1 + a.q_norm.weight), qg[..., d:]
    k = _rms((x @ a.k_proj.weight.T).view(t, a.num_kv_heads, d), 1 + a.k_norm.weight)
    v = (x @ a.v_proj.weight.T).view(t, a.num_kv_heads, d)
    ang = torch.arange(t, dtype=x.dtype)[:, None] * cfg.rope_theta ** (-torch.arange(0, rd, 2, dtype=x.dtype) / rd)
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]

    def rope(y):
        r1, r2 = y[..., : rd // 2], y[..., rd // 2 : rd]
        return torch.cat([y[..., :rd] * cos + torch.cat([-r2, r1], -1) * sin, y[..., rd:]], -1)

    q, k = rope(q), rope(k)
    out = x.new_zeros(t, a.num_heads, d)
    for h in range(a.num_heads):
        kv = h // (a.num_heads // a.num_kv_heads)
        for i in range(t):
            p = torch.softmax(k[: i + 1, kv] @ q[i, h] / d**0.5, 0)
            out[i, h] = p @ v[: i + 1, kv]
    return (out.reshape(t, -1) * torch.sigmoid(gate.reshape(t, -1))) @ a.o_proj.weight.T


@functools.cache
def tiny64() -> Qwen35Model:
    return copy.deepcopy(tiny()).double()


def reference_logits(tokens: list[int]) -> torch.Tensor:
    """``tiny()``'s logits over ``tokens``, from scratch, in float64 (rounded to float32 at the end)."""
    model = tiny64()
    cfg = model.config
    x = model.embed_tokens.weight[tokens]
    for layer in model.layers:
        h = _rms(x, 1 + layer.input_layernorm.weight)
        if layer.kind == "linear_attention":
            x = x + _ref_linear(layer.linear_attn, h)
        else:
            x = x + _ref_attention(layer.self_attn, h, cfg)
        h = _rms(x, 1 + layer.post_attention_layernorm.weight)
        mlp = layer.mlp
        x = x + (F.silu(h @ mlp.gate_proj.weight.T) * (h @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T
    return (_rms(x, 1 + model.norm.weight) @ model.lm_head_weight.T).float()


def prompts(seed: int, lens: list[int]) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 512, (n,), generator=g).tolist() for n in lens]


# --- config and presets ------------------------------------------------------------------------------------


def test_presets_and_layer_types():
    for name, hidden, ffn in [("qwen3.5-2b", 2048, 6144), ("qwen3.5-0.8b", 1024, 3584)]:
        c = Qwen35Config.preset(name)
        assert (c.hidden_size, c.intermediate_size, c.num_layers, c.vocab_size) == (hidden, ffn, 24, 248320)
        assert (c.num_heads, c.num_kv_heads, c.head_dim, c.rotary_dim) == (8, 2, 256, 64)
        assert (c.linear_num_key_heads, c.linear_num_value_heads, c.linear_key_head_dim) == (16, 16, 128)
        assert (c.linear_value_head_dim, c.linear_conv_kernel_dim, c.conv_dim) == (128, 4, 6144)
        assert c.layers_of("full_attention") == (3, 7, 11, 15, 19, 23) and len(c.layers_of("linear_attention")) == 18
        assert c.tie_embeddings
    total = sum(p.numel() for p in Qwen35Model.create("qwen3.5-0.8b", device="meta").parameters())
    assert 0.70e9 < total < 0.80e9  # the text model of Qwen3.5-0.8B (the vision tower is the rest)
    assert Qwen35Config.preset("qwen3.5-tiny").layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert (
        Qwen35Config("x", 2, 64, 4, 2, 16, 128, 512, layer_types=("full_attention",) * 2).layers_of("linear_attention")
        == ()
    )
    with pytest.raises(ValueError, match="layer_types"):
        Qwen35Config("x", 2, 64, 4, 2, 16, 128, 512, layer_types=("linear_attention",))


# --- the forward against the plain reference ----------------------------------------------------------------


def test_prefill_and_verify_match_reference():
    """A ragged prefill, then a verification of W = 4 rows writing one state per row, equal the
    from-scratch reference over prompt + rows."""
    model = tiny()
    ps, ver = prompts(1, [9, 4, 13]), prompts(2, [4, 4, 4])
    bt = fresh(model, 3, 16)
    pre = forward(model, bt, ps, [0, 0, 0], [-1, -1, -1], last_only(ps, [0, 1, 2]))
    writes = [[3 + 4 * b + j for j in range(4)] for b in range(3)]
    out = forward(model, bt, ver, [len(p) for p in ps], [0, 1, 2], writes)
    for b in range(3):
        seq = ps[b] + ver[b]
        torch.testing.assert_close(torch.cat([pre[b], out[b]]), reference_logits(seq), **TOL)


def test_token_by_token_decode_matches_reference():
    model = tiny()
    seq = prompts(3, [14])[0]
    bt = fresh(model, 1, 1)
    got = []
    for i, t in enumerate(seq):  # plain decoding: one slot, read and overwritten by every step
        got += forward(model, bt, [[t]], [i], [0 if i else -1], [[0]])
    torch.testing.assert_close(torch.cat(got), reference_logits(seq), **TOL)


def test_continuing_from_row_j_equals_recomputing_over_j_plus_one_rows():
    model = tiny()
    (p,), (rows,), (nxt,) = prompts(4, [7]), prompts(5, [5]), prompts(6, [3])
    bt = fresh(model, 1, 8)
    forward(model, bt, [p], [0], [-1], [[-1] * 6 + [0]])
    forward(model, bt, [rows], [7], [0], [[1, 2, 3, 4, 5]])
    pool = model.linear_state
    kept = [[(pool.recurrent[layer][s].clone(), pool.conv[layer][s].clone()) for s in range(6)] for layer in range(3)]
    for j in range(5):
        committed = p + rows[: j + 1]
        model.allocate_linear_state(2)  # from scratch: the committed tokens in one prefill
        forward(model, bt, [committed], [0], [-1], [[-1] * (len(committed) - 1) + [0]])
        for layer in range(3):
            state, window = kept[layer][j + 1]
            torch.testing.assert_close(model.linear_state.recurrent[layer][0], state, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(model.linear_state.conv[layer][0], window, atol=1e-6, rtol=1e-6)
        # the next step continues from row j's slot (restored into slot 1)
        for layer in range(3):
            model.linear_state.recurrent[layer][1] = kept[layer][j + 1][0]
            model.linear_state.conv[layer][1] = kept[layer][j + 1][1]
        (cont,) = forward(model, bt, [nxt], [len(committed)], [1], [[-1, -1, -1]])
        torch.testing.assert_close(cont, reference_logits(committed + nxt)[len(committed) :], **TOL)


def test_slots_are_isolated_and_minus_one_is_nothing():
    """A forward changes exactly the slots it names; a -1 read is the zero state whatever the scratch holds."""
    model = tiny()
    ps = prompts(7, [6, 6])
    bt = fresh(model, 2, 6)
    pool = model.linear_state
    g = torch.Generator().manual_seed(0)
    for layer in range(3):
        pool._state[layer].copy_(torch.randn(pool._state[layer].shape, generator=g))
        pool._conv[layer].copy_(torch.randn(pool._conv[layer].shape, generator=g))
    before = pool._state.clone(), pool._conv.clone()
    a = forward(model, bt, ps, [0, 0], [-1, -1], [[-1, 4, -1, -1, -1, 2], [-1] * 6])
    for layer in range(3):
        for s in range(6):
            changed = not torch.equal(pool._state[layer, s], before[0][layer, s])
            assert changed == (s in (2, 4)), (layer, s)
            assert changed == (not torch.equal(pool._conv[layer, s], before[1][layer, s]))
    model.allocate_linear_state(6)
    b = forward(model, bt, ps, [0, 0], [-1, -1], [[-1] * 6, [-1] * 6])
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_taps_and_capabilities():
    model = tiny()
    bt = fresh(model, 1, 2)
    toks = torch.tensor(prompts(8, [5])[0])
    pos = torch.arange(5)
    meta = (pos, slot(bt, pos[None], BS)[0], bt, torch.tensor([5]), torch.tensor([0, 5]), 5)
    states = {"state_read": torch.tensor([-1]), "state_write": torch.full((5,), -1)}
    hidden, logits, tapped = model(toks, *meta, taps=(1, 3), **states)
    assert tapped.shape == (5, 128) and torch.equal(tapped[:, 64:], hidden)
    caps = model.speculative_verify_capabilities()
    assert not caps.supports_in_graph_input_update  # no fixed block-table width yet
    model.allocate_kv_cache(4, BS, block_table_width=4)
    assert model.speculative_verify_capabilities().has_linear_state


# --- transformers' Qwen3.5 and the Hugging Face loader -------------------------------------------------------


def hf_config(cfg: Qwen35Config):
    pytest.importorskip("transformers", reason="transformers is not installed: no Qwen3.5 to compare")
    return hf_text_config(cfg)


@functools.cache
def hf_model():
    """transformers' Qwen3.5 causal LM (eager attention, torch conv and recurrence) with ``tiny()``'s weights."""
    config = hf_config(tiny().config)  # skips without transformers
    import transformers

    model = transformers.Qwen3_5ForCausalLM._from_config(config, attn_implementation="eager", dtype=torch.float32)
    state = {f"model.{k}": v for k, v in tiny().state_dict().items()}
    model.load_state_dict({**state, "lm_head.weight": tiny().embed_tokens.weight}, strict=True)
    return model.eval()


@torch.inference_mode()
def test_logits_equal_transformers_qwen3_5():
    """Full prompts (transformers' chunked rule from a zero state), a verification of 4 rows writing 4
    states (its chunked rule from the cached state), then single tokens from the last row's slot (its
    token-by-token recurrence and conv update)."""
    hf, model = hf_model(), tiny()
    ps, steps = prompts(9, [5, 17, 70]), prompts(10, [7, 7, 7])
    bt = fresh(model, 3, 15, blocks_per_seq=12)
    ours = forward(model, bt, ps, [0, 0, 0], [-1, -1, -1], last_only(ps, [0, 1, 2]))
    for b, p in enumerate(ps):
        out = hf(input_ids=torch.tensor([p]), use_cache=True)
        torch.testing.assert_close(ours[b], out.logits[0], **TOL)
        rows, writes = steps[b][:4], [3 + 4 * b + j for j in range(4)]
        out = hf(input_ids=torch.tensor([rows]), cache=out.cache, use_cache=True)
        (mine,) = forward(model, bt[b : b + 1], [rows], [len(p)], [b], [writes])
        torch.testing.assert_close(mine, out.logits[0], **TOL)
        for i, t in enumerate(steps[b][4:]):
            out = hf(input_ids=torch.tensor([[t]]), cache=out.cache, use_cache=True)
            (mine,) = forward(model, bt[b : b + 1], [[t]], [len(p) + 4 + i], [writes[-1]], [[writes[-1]]])
            torch.testing.assert_close(mine, out.logits[0], **TOL)


@pytest.mark.parametrize("prefix", ["model.", "model.language_model."])
def test_from_hf_state_dict_loads_transformers_names(tmp_path, prefix):
    hf = hf_model()
    hf.config.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    if prefix != "model.":  # the vision-language checkpoint: text_config, the vision tower's and MTP tensors
        config = {"model_type": "qwen3_5", "text_config": config, "tie_word_embeddings": True, "vision_config": {}}
    tensors = {prefix + k.removeprefix("model."): v for k, v in hf.state_dict().items()}
    tensors |= {"model.visual.blocks.0.attn.qkv.weight": torch.zeros(1), "mtp.fc.weight": torch.zeros(1)}
    save_file(tensors, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(config))
    loaded = Qwen35Model.from_pretrained(tmp_path)
    assert loaded.config.layer_types == tiny().config.layer_types and loaded.config.tie_embeddings
    for (name, a), b in zip(tiny().named_parameters(), loaded.parameters()):
        assert torch.equal(a, b), name


def test_loader_refuses_what_it_does_not_understand():
    hf_config(tiny().config)  # skips without transformers, like the tests above
    config = json.loads(hf_model().config.to_json_string(use_diff=True))
    tensors = {f"model.{k}": v for k, v in tiny().state_dict().items()}
    for extra, match in [
        ({"num_experts": 8}, "'num_experts'"),
        ({"hidden_act": "gelu"}, "'hidden_act' is 'gelu'"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e7}}, "rope_type"),
        ({"rope_parameters": {"rope_theta": 1e7, "factor": 4.0}}, "'rope_parameters.factor'"),
    ]:
        with pytest.raises(ValueError, match=match):
            Qwen35Model.from_hf_state_dict({**config, **extra}, tensors)
    with pytest.raises(ValueError, match="'audio_config'"):
        Qwen35Model.from_hf_state_dict({"text_config": config, "audio_config": {}}, tensors)
    with pytest.raises(ValueError, match="linear_num_value_heads"):
        Qwen35Model.from_hf_state_dict({k: v for k, v in config.items() if k != "linear_num_value_heads"}, tensors)
    with pytest.raises(KeyError, match="no place"):
        Qwen35Model.from_hf_state_dict(config, {**tensors, "model.layers.0.linear_attn.in_proj_ba.weight": 0})
    del tensors["model.layers.3.self_attn.q_norm.weight"]
    with pytest.raises(KeyError, match="q_norm"):
        Qwen35Model.from_hf_state_dict(config, tensors)
