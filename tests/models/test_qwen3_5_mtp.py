"""The MTP head over a Qwen3.5-style hybrid target: a checkpoint's ``mtp.*`` module, loaded by name.

Its logits equal a from-scratch computation of the module from the raw
checkpoint tensors (float32 on the CPU), the engine over it still emits exactly
the target's greedy tokens, and a checkpoint whose ``mtp.*`` tensors do not
fit is a one-line error naming the tensor.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from oracles.hybrid_reference import hybrid_greedy

from specgen.engine.acceptance import AcceptanceMix
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.models import BlockAllocator, EngineError, MTPHead, Qwen3Model, make_block_table, slot
from specgen.models.checkpoint import load_folder
from specgen.models.qwen3_5 import Qwen35Model
from specgen.models.qwen3_5_mtp import Qwen35MTPHead

BS = 16
TOL = {"atol": 1e-4, "rtol": 1e-4}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> tuple[Qwen35Model, dict]:
    """A transformers-written tiny Qwen3.5 folder with ``mtp.*`` tensors: the loaded target and the raw tensors."""
    pytest.importorskip("transformers", reason="transformers is a test-only dependency")
    from oracles.hf_qwen3_5 import hf_qwen35_folder

    folder = tmp_path_factory.mktemp("qwen35-mtp")
    hf_qwen35_folder(folder, mtp=True)
    return Qwen35Model.from_pretrained(folder), load_folder(folder)


def _rms(x, w, eps):
    """Qwen3.5's zero-centred RMSNorm: gain ``1 + w``."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)


def reference(raw: dict, cfg, tokens: list[int], hidden: torch.Tensor, start: int) -> tuple[torch.Tensor, ...]:
    """The MTP module from the raw tensors, in float64: one sequence whose row i (position ``start + i``)
    reads ``tokens[i]`` and ``hidden[i]`` (already as the module reads it), causal attention over the rows.
    Returns ``(h, logits)`` of every row."""
    t = {k: v.double() for k, v in raw.items()}
    eps, d, rd, nh, nkv = cfg.rms_eps, cfg.head_dim, cfg.rotary_dim, cfg.num_heads, cfg.num_kv_heads
    embed = t["model.embed_tokens.weight"]
    e = _rms(embed[tokens], t["mtp.pre_fc_norm_embedding.weight"], eps)
    x = torch.cat([e, _rms(hidden.double(), t["mtp.pre_fc_norm_hidden.weight"], eps)], -1) @ t["mtp.fc.weight"].T
    p = "mtp.layers.0."
    n = len(tokens)
    a = _rms(x, t[p + "input_layernorm.weight"], eps)
    qg = (a @ t[p + "self_attn.q_proj.weight"].T).view(n, nh, 2 * d)
    q, gate = _rms(qg[..., :d], t[p + "self_attn.q_norm.weight"], eps), qg[..., d:]
    k = _rms((a @ t[p + "self_attn.k_proj.weight"].T).view(n, nkv, d), t[p + "self_attn.k_norm.weight"], eps)
    v = (a @ t[p + "self_attn.v_proj.weight"].T).view(n, nkv, d)
    pos = torch.arange(start, start + n, dtype=torch.float64)
    ang = pos[:, None] * cfg.rope_theta ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]

    def rope(y):  # rotate-half on the first rd dims of each head, the rest pass
        r1, r2 = y[..., : rd // 2], y[..., rd // 2 : rd]
        return torch.cat([y[..., :rd] * cos + torch.cat([-r2, r1], -1) * sin, y[..., rd:]], -1)

    q, k = rope(q), rope(k)
    out = torch.zeros(n, nh, d, dtype=torch.float64)
    for h in range(nh):
        g = h // (nh // nkv)
        for i in range(n):
            w = torch.softmax(k[: i + 1, g] @ q[i, h] / d**0.5, 0)
            out[i, h] = w @ v[: i + 1, g]
    x = x + (out.reshape(n, -1) * torch.sigmoid(gate.reshape(n, -1))) @ t[p + "self_attn.o_proj.weight"].T
    m = _rms(x, t[p + "post_attention_layernorm.weight"], eps)
    mlp = F.silu(m @ t[p + "mlp.gate_proj.weight"].T) * (m @ t[p + "mlp.up_proj.weight"].T)
    x = x + mlp @ t[p + "mlp.down_proj.weight"].T
    h = _rms(x, t["mtp.norm.weight"], eps)
    return h.float(), (h @ embed.T).float()  # the tied LM head


def target_hidden(model: Qwen35Model, tokens: list[int]) -> torch.Tensor:
    """The target's pre-norm hidden state of every row of one prefill."""
    n = len(tokens)
    model.allocate_kv_cache(4, BS, block_table_width=4)
    model.allocate_linear_state(1)
    bt = make_block_table(BlockAllocator(4, seed=2), 1, 4)
    pos = torch.arange(n)
    write = torch.full((n,), -1)
    hidden, _ = model(
        torch.tensor(tokens),
        pos,
        slot(bt, pos[None], BS)[0],
        bt,
        torch.tensor([n]),
        torch.tensor([0, n]),
        n,
        state_read=torch.tensor([-1]),
        state_write=write,
    )
    return hidden


def test_the_checkpoint_mtp_module_equals_its_formula(ckpt):
    """The draft prefill (rows at positions 1..n-1 reading the target's hidden state of the row before),
    then a chained one-row step reading the head's own output, against the module from the raw tensors."""
    target, raw = ckpt
    head = DRAFT_KINDS["mtp"].create(target, seed=1)
    assert type(head) is Qwen35MTPHead and head.from_checkpoint
    tokens = torch.randint(0, 512, (12,), generator=torch.Generator().manual_seed(3)).tolist()
    n = len(tokens)
    hidden = target_hidden(target, tokens)
    # the module reads the target's hidden state after its final norm
    normed = _rms(hidden.double(), raw["model.norm.weight"].double(), target.config.rms_eps).float()
    torch.testing.assert_close(head.from_target(hidden), normed, **TOL)

    head.allocate_kv_cache(4, BS)
    bt = make_block_table(BlockAllocator(4, seed=3), 1, 4)
    pos = torch.arange(1, n)
    args = (pos, slot(bt, pos[None], BS)[0], head.from_target(hidden[:-1]), bt, torch.tensor([n]))
    h, logits = head(torch.tensor(tokens[1:]), *args, torch.tensor([0, n - 1]), n - 1)
    want_h, want = reference(raw, target.config, tokens[1:], normed[:-1], start=1)
    torch.testing.assert_close(logits, want, **TOL)
    torch.testing.assert_close(h, want_h, **TOL)

    draft = int(logits[-1].argmax())
    p = torch.tensor([n])
    h1, logits1 = head(
        torch.tensor([draft]), p, slot(bt, p[:, None], BS)[0], h[-1:], bt, p + 1, torch.tensor([0, 1]), 1
    )
    _, want = reference(raw, target.config, tokens[1:] + [draft], torch.cat([normed[:-1], h[-1:]]), start=1)
    torch.testing.assert_close(logits1[0], want[-1], **TOL)


@pytest.mark.parametrize("mode", ["baseline", "compile", "specgen"])
@pytest.mark.parametrize("p", [None, 0.8], ids=["own-drafts", "p0.8"])
def test_the_engine_over_the_checkpoint_mtp_is_lossless(ckpt, hybrid_kernels, mode, p):
    target, _ = ckpt
    width, batch, new = 4, 3, 10
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(0, 512, (n,), generator=gen).tolist() for n in (1, 6, 11)]
    want = hybrid_greedy(target, prompts, new + width)
    kind = DRAFT_KINDS["mtp"]
    mix = None if p is None else AcceptanceMix(p, torch.tensor(want), target.config.vocab_size, seed=1)
    engine = kind.engine(
        target,
        kind.create(target, seed=1),
        mode=mode,
        width=width,
        batch=batch,
        block_size=BS,
        block_table_width=8,
        library=hybrid_kernels,
        acceptance=mix,
        compile_backend="eager",
    )
    res = engine.run(prompts, max_new_tokens=new)
    assert res.outputs == [w[:new] for w in want]
    if p is not None:
        assert res.acceptance > 0
    if mode == "specgen":
        assert res.runtime_stats["fallback"] == {} and res.runtime_stats["fast_path"] == res.steps


def test_mtp_tensors_that_do_not_fit_name_themselves(ckpt):
    target, raw = ckpt
    mtp = {k: v for k, v in raw.items() if k.startswith("mtp.")}
    assert set(target.mtp_tensors) == set(mtp)
    for tensors, message in [
        ({**mtp, "mtp.layers.1.mlp.up_proj.weight": mtp["mtp.layers.0.mlp.up_proj.weight"]}, "mtp.layers.1.mlp"),
        ({k: v for k, v in mtp.items() if k != "mtp.norm.weight"}, "lacks 'mtp.norm.weight'"),
        ({**mtp, "mtp.fc.weight": mtp["mtp.fc.weight"][:, :64]}, "'mtp.fc.weight': shape (64, 64)"),
    ]:
        with pytest.raises(EngineError, match=re.escape(message)) as e:
            Qwen35MTPHead.from_checkpoint_tensors(target, tensors)
        assert "\n" not in str(e.value)


def test_the_head_a_target_takes():
    """A hybrid target without mtp.* tensors takes the Qwen3.5 layer with seeded random weights; a Qwen3
    target the dense head, as before."""
    hybrid = Qwen35Model.create("qwen3.5-tiny", seed=0)
    a, b = (DRAFT_KINDS["mtp"].create(hybrid, seed=1) for _ in range(2))
    assert type(a) is Qwen35MTPHead and not a.from_checkpoint
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    names = {n for n, _ in a.named_parameters()}
    assert {"fc.weight", "pre_fc_norm_embedding.weight", "layers.0.self_attn.q_norm.weight", "norm.weight"} <= names
    dense = DRAFT_KINDS["mtp"].create(Qwen3Model.create("tiny", seed=0), seed=1)
    assert type(dense) is MTPHead and not dense.from_checkpoint
    with pytest.raises(EngineError, match="--draft-weights"):
        DRAFT_KINDS["mtp"].create(hybrid, weights="somewhere")
