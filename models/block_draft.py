"""Block drafts (DFlash, DSpark): a few decoder layers over the target's tapped hidden states.

The target exposes the outputs of ``L_ctx`` layers for every row it runs.
Concatenated, they become the draft's *context*::

    c = hidden_norm(fc(cat(tapped layers)))                   # fc has no bias
    K_ctx[l] = RoPE(k_norm(k_proj_l(c)))    V_ctx[l] = v_proj_l(c)

stored per draft layer ``l`` in the draft's own paged KV cache at the slot of
the committed token's position (``write_context``).  One draft forward
(``propose``) embeds the block ``[anchor, MASK, ..., MASK]`` at positions
``S .. S + R - 1`` with the target's embedding; every row attends to the
context K/V of positions ``< S`` and to every row of the block (no causal
mask inside the block); the block's own K/V never becomes context.

* DFlash: ``R = K + 1`` rows; row ``j`` (1..K) predicts position ``S + j``.
* DSpark: ``R = K`` rows; row ``j`` (0..K-1) predicts position ``S + j + 1``
  and a low-rank Markov head adds ``W2 @ W1[prev]`` to its logits, ``prev``
  being the anchor for row 0 and the draft chosen at row ``j - 1`` after that
  (``MarkovHead.chain``, sequential over the rows).

The drafts' argmax and the Markov bias's GEMM follow the target's forward
kernels (``forward_kernels``): on CUDA with Triton, ``cuda_forward.argmax``
(two short launches, torch's indices exactly) and the skinny GEMM, neither of
which puts a memset node in the draft's graph as torch's argmax and cuBLAS do.

Either way the verification is ``W = K + 1`` wide; only DSpark's draft width
(``rows(K) = K``) differs from it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from . import cuda_forward
from .checkpoint import load_folder
from .draft_vocab import head_weight
from .errors import EngineError
from .paged_kv import PagedKVCache
from .qwen3 import (
    EMBED_STD,
    LOGIT_STD,
    DecoderLayer,
    Qwen3Model,
    RMSNorm,
    apply_rope,
    build_on,
    draft_config,
    init_random_weights,
)

__all__ = ["BLOCK_KINDS", "BlockDraft", "BlockDraftConfig", "MarkovHead", "rope_tables", "tap_layers"]

BLOCK_KINDS = ("dflash", "dspark")


def tap_layers(num_layers: int, n: int) -> tuple[int, ...]:
    """``n`` target layers spread evenly over ``1 .. L - 3`` (never the last layer).

    A target too shallow for that range taps among ``0 .. L - 2``.
    """
    lo, hi = (1, num_layers - 3) if num_layers >= 4 else (0, num_layers - 2)
    if hi < lo:
        raise EngineError(f"a target of {num_layers} layer(s) has no layer to tap besides the last")
    n = max(1, min(n, hi - lo + 1))
    if n == 1:
        return (lo,)
    return tuple(sorted({lo + round(i * (hi - lo) / (n - 1)) for i in range(n)}))


def rope_tables(positions: torch.Tensor, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary ``cos, sin [N, head_dim]`` of ``positions`` (the target's rotate-half convention)."""
    half = torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim
    freqs = positions.long().float()[:, None] * (1.0 / (theta**half))
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


@dataclass(frozen=True)
class BlockDraftConfig:
    kind: str  # "dflash" or "dspark"
    num_layers: int
    tap_layers: tuple[int, ...]  # target layers whose outputs make the context
    mask_token_id: int
    markov_rank: int = 0  # DSpark's Markov head rank (0 for DFlash)

    def __post_init__(self):
        if self.kind not in BLOCK_KINDS:
            raise EngineError(f"unknown block draft kind {self.kind!r} (known: {', '.join(BLOCK_KINDS)})")
        if self.kind == "dspark" and self.markov_rank < 1:
            raise EngineError("a DSpark draft needs a Markov head rank of at least 1")

    @classmethod
    def default(
        cls,
        kind: str,
        target_layers: int,
        vocab_size: int,
        *,
        num_layers: int = 2,
        taps: int = 3,
        markov_rank: int = 16,
    ) -> "BlockDraftConfig":
        return cls(
            kind, num_layers, tap_layers(target_layers, taps), vocab_size - 1, markov_rank if kind == "dspark" else 0
        )

    def rows(self, depth: int) -> int:
        """Rows of the draft forward for ``depth`` drafts (the verify width is ``depth + 1`` for both kinds)."""
        return depth + 1 if self.kind == "dflash" else depth


class MarkovHead(nn.Module):
    """DSpark's low-rank Markov bias: ``logits_j += W2 @ W1[prev_j]``."""

    def __init__(self, vocab_size: int, rank: int):
        super().__init__()
        self.w1 = nn.Embedding(vocab_size, rank)
        self.w2 = nn.Linear(rank, vocab_size, bias=False)

    vocab_w2: torch.Tensor | None = None  # w2's rows of a draft vocabulary's ids (draft_vocab.apply_draft_vocab)

    def bias(self, prev: torch.Tensor, kernels: str = "torch", w2: torch.Tensor | None = None) -> torch.Tensor:
        e = self.w1(prev.long())
        w2 = self.w2.weight if w2 is None else w2
        return cuda_forward.linear(e, w2) if cuda_forward.use_triton(kernels, e.device) else F.linear(e, w2)

    def chain(self, logits: torch.Tensor, anchor: torch.Tensor, kernels: str = "torch", vocab=None) -> torch.Tensor:
        """``logits [B, K, V]`` -> drafts ``[B, K]``, each row biased by the previous choice (sequential);
        ``kernels``: the target's ``forward_kernels``, which the bias GEMM and the argmax follow.  With a draft
        vocabulary (``vocab``) the logits cover its ids, the bias its rows of ``w2``, and each choice maps back
        to its token id before it biases the next."""
        prev, out = anchor.long(), []
        w2 = None if vocab is None else self.vocab_w2
        for j in range(logits.shape[1]):
            index = cuda_forward.argmax(logits[:, j] + self.bias(prev, kernels, w2).to(logits.dtype), kernels)
            prev = index if vocab is None else vocab.tokens(index)
            out.append(prev)
        return torch.stack(out, 1)


class BlockDraft(nn.Module):
    """A DFlash / DSpark draft sharing the target's embedding and LM head; see the module docstring."""

    draft_vocab = None  # a draft_vocab.DraftVocab: the logits over its ids alone (None: the whole vocabulary)

    def __init__(self, target: Qwen3Model, config: BlockDraftConfig):
        super().__init__()
        cfg = draft_config(target)
        self.config, self.target_config = config, cfg
        self.fc = nn.Linear(len(config.tap_layers) * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(config.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        if config.kind == "dspark":
            self.markov_head = MarkovHead(cfg.vocab_size, config.markov_rank)
        self._target = (target,)  # shared, not a submodule: its weights stay the target's
        self.kv_cache: PagedKVCache | None = None

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def tap_layers(self) -> tuple[int, ...]:
        return self.config.tap_layers

    def rows(self, depth: int) -> int:
        return self.config.rows(depth)

    @classmethod
    def create(cls, target: Qwen3Model, config: BlockDraftConfig, seed: int | None = 1) -> "BlockDraft":
        """Random weights from ``seed`` (None leaves them unset, for loading)."""
        w = target.embed_tokens.weight
        draft = build_on(lambda: cls(target, config), w.dtype, w.device)
        if seed is not None:
            init_random_weights(draft, seed)
            with torch.no_grad():
                draft.norm.weight.fill_(LOGIT_STD / (EMBED_STD * math.sqrt(draft_config(target).hidden_size)))
        return draft.eval().requires_grad_(False)

    @classmethod
    def from_folder(cls, target: Qwen3Model, kind: str, folder: str | Path) -> "BlockDraft":
        """A draft from a local safetensors folder with the public DFlash names.

        ``fc.weight``, ``hidden_norm.weight``, ``layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj,
        self_attn.{q,k}_norm, post_attention_layernorm, mlp.{gate,up,down}_proj}.weight``,
        ``norm.weight`` (a ``model.`` prefix is dropped) and, for DSpark,
        ``markov_head.w1.weight [V, r]``, ``markov_head.w2.weight [V, r]``.  An optional
        ``config.json`` gives ``dflash_config.target_layer_ids`` and ``mask_token_id``.
        """
        try:
            tensors = {k.removeprefix("model."): v for k, v in load_folder(folder).items()}
        except (OSError, ValueError, KeyError) as e:
            raise EngineError(f"--draft-weights {folder}: {e}") from None
        config = _config_from(kind, target, tensors, Path(folder))
        draft = cls.create(target, config, seed=None)
        draft.load_state(tensors, str(folder))
        return draft

    def load_state(self, tensors: dict[str, torch.Tensor], where: str = "checkpoint") -> None:
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(tensors))
        if missing:
            raise EngineError(f"{where}: lacks {len(missing)} draft tensors, e.g. {missing[:3]}")
        with torch.no_grad():
            for name, p in own.items():
                if tuple(tensors[name].shape) != tuple(p.shape):
                    raise EngineError(
                        f"{where}: {name} has shape {tuple(tensors[name].shape)}, "
                        f"the target's shapes need {tuple(p.shape)}"
                    )
                p.copy_(tensors[name])

    def allocate_kv_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        c, w = self.target_config, self.fc.weight
        self.kv_cache = PagedKVCache(
            self.config.num_layers, num_blocks, block_size, c.num_kv_heads, c.head_dim, w.dtype, w.device
        )
        if cuda_forward.use_triton(self._target[0].forward_kernels, w.device):
            # the fast projection's k|v weights, fused now: fusing re-points k_proj and v_proj at views of the
            # fused tensor, which must not happen after a graph that reads them (the draft's) is captured
            for layer in self.layers:
                cuda_forward.fused_weight(layer.self_attn, ("k_proj", "v_proj"))
        return self.kv_cache

    # ----------------------------------------------------------- context K/V
    def write_context(self, taps: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> None:
        """Project ``taps [N, L_ctx * H]`` of positions ``positions[N]`` into every layer's K/V at ``slots``.

        A slot of -1 writes nothing (the rejected rows of a verification). With the target's fast forward
        (``cuda_forward.use_triton``) the projection is its kernels (``_project_fast``), else torch ops.
        """
        if self._fast(taps):
            self._project_fast(
                taps, positions, slots, [self.kv_cache.layer_storage(i) for i in range(len(self.layers))]
            )
            return
        for i, (k, v) in enumerate(self.context_kv(taps, positions)):
            self.kv_cache.write(i, slots, k, v)

    def context_kv(self, taps: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per draft layer, the context ``(K, V) [N, kv_heads, head_dim]`` of ``taps [N, L_ctx * H]``: the values
        ``write_context`` stores, by the same path."""
        c = self.target_config
        if self._fast(taps):
            n, dtype = taps.shape[0], self.fc.weight.dtype
            shape = (n + 1, c.num_kv_heads, c.head_dim)
            out = [(taps.new_empty(shape, dtype=dtype), taps.new_empty(shape, dtype=dtype)) for _ in self.layers]
            self._project_fast(taps, positions, torch.arange(n, device=taps.device), out)
            return [(k[:n], v[:n]) for k, v in out]
        x = self.hidden_norm(self.fc(taps.to(self.fc.weight.dtype)))
        cos, sin = rope_tables(positions, c.head_dim, c.rope_theta)
        n, out = x.shape[0], []
        for layer in self.layers:
            a = layer.self_attn
            k = apply_rope(a.k_norm(a.k_proj(x).view(n, c.num_kv_heads, c.head_dim)), cos, sin)
            out.append((k, a.v_proj(x).view(n, c.num_kv_heads, c.head_dim)))
        return out

    def _fast(self, taps: torch.Tensor) -> bool:
        return self.fast_on(taps.device)

    def fast_on(self, device: torch.device) -> bool:
        """Whether the context projection on ``device`` runs the target's fast forward's kernels."""
        return cuda_forward.use_triton(self._target[0].forward_kernels, device)

    def context_rows(self, taps: torch.Tensor) -> list[torch.Tensor]:
        """The fast projection's part that reads only the taps: per draft layer ``k|v [N, 2 * kv_heads * D]`` of
        ``taps [N, L_ctx * H]`` (the ``fc`` GEMM, the norm, the layer's ``k|v`` GEMM); ``store_context`` writes
        them. Nothing here depends on which rows a verification accepts, so it can run beside the target's
        later layers."""
        x = cuda_forward.linear(taps.to(self.fc.weight.dtype), self.fc.weight)
        _, h = cuda_forward.add_rms_norm(x, None, self.hidden_norm)
        return [cuda_forward.kv_rows(layer.self_attn, h) for layer in self.layers]

    def store_context(self, rows: list[torch.Tensor], positions: torch.Tensor, slots: torch.Tensor, storages=None):
        """``context_rows``' output into every layer's K/V (``storages``: the cache's, by default) at ``slots``
        (-1: no write): k normed and rotated at ``positions``, one launch a layer."""
        if storages is None:
            storages = [self.kv_cache.layer_storage(i) for i in range(len(self.layers))]
        for layer, kv, (kc, vc) in zip(self.layers, rows, storages):
            cuda_forward.store_kv_rows(layer.self_attn, kv, positions, slots, kc, vc, self.target_config.rope_theta)

    def _project_fast(self, taps, positions, slots, storages) -> None:
        """The projection in 2 + 2 * layers launches, the target's fast forward's kernels: ``context_rows`` (the
        ``fc`` GEMM, the norm, per layer the ``k|v`` GEMM), then ``store_context`` (per layer k normed and rotated,
        both stored at ``slots`` of the layer's ``(K, V)`` storage). The torch ops take about eight launches a
        layer more."""
        self.store_context(self.context_rows(taps), positions, slots, storages)

    # ------------------------------------------------------------ the block
    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        block_table: torch.Tensor,
        context_lens: torch.Tensor,
        rows: int,
    ) -> torch.Tensor:
        """``tokens[B * R]`` at ``positions`` -> logits ``[B, R, V]``; context is positions ``< context_lens[b]``."""
        c, target = self.target_config, self._target[0]
        b = context_lens.shape[0]
        x = target.embed_tokens(tokens.long())
        cos, sin = rope_tables(positions, c.head_dim, c.rope_theta)
        span = block_table.shape[1] * self.kv_cache.block_size
        ctx_visible = torch.arange(span, device=x.device) < context_lens.long()[:, None]
        visible = torch.cat([ctx_visible, ctx_visible.new_ones(b, rows)], 1)  # the block sees all of itself
        for i, layer in enumerate(self.layers):
            h = layer.input_layernorm(x)
            x = x + self._attend(layer.self_attn, h, cos, sin, i, block_table, visible, b, rows)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        h = self.norm(x)  # the LM head as the target's forward runs it
        return cuda_forward.lm_head(h, head_weight(self, target), self.fast_on(h.device)).view(b, rows, -1)

    def _attend(self, a, x, cos, sin, layer: int, block_table, visible, b: int, rows: int) -> torch.Tensor:
        c = self.target_config
        n, kvh, d = x.shape[0], c.num_kv_heads, c.head_dim
        q = a.q_norm(a.q_proj(x).view(n, c.num_heads, d))
        k = a.k_norm(a.k_proj(x).view(n, kvh, d))
        qk = apply_rope(torch.cat([q, k], dim=1), cos, sin)
        q, k = qk[:, : c.num_heads], qk[:, c.num_heads :]
        kc, vc = self.kv_cache.gather(layer, block_table)
        keys = torch.cat([kc, k.view(b, rows, kvh, d)], 1)
        vals = torch.cat([vc, a.v_proj(x).view(b, rows, kvh, d)], 1)
        qg = q.reshape(b, rows, kvh, c.num_heads // kvh, d)
        scores = torch.einsum("brkgd,blkd->bkgrl", qg, keys).float() * d**-0.5
        scores = scores.masked_fill(~visible[:, None, None, None], torch.finfo(torch.float32).min)
        probs = torch.softmax(scores, dim=-1).to(vals.dtype)
        out = torch.einsum("bkgrl,blkd->brkgd", probs, vals).reshape(n, -1)
        return a.o_proj(out)

    def propose(
        self, anchor: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor, depth: int
    ) -> torch.Tensor:
        """``depth`` drafts ``[B, depth]`` for positions ``S + 1 .. S + depth``; one forward (fixed shapes)."""
        b, rows = anchor.shape[0], self.rows(depth)
        mask = torch.full((b, rows - 1), self.config.mask_token_id, dtype=torch.long, device=anchor.device)
        tokens = torch.cat([anchor.long()[:, None], mask], 1).reshape(-1)
        pos = (seq_lens.long()[:, None] + torch.arange(rows, device=anchor.device)).reshape(-1)
        logits = self(tokens, pos, block_table, seq_lens, rows)
        kernels = self._target[0].forward_kernels
        vocab = self.draft_vocab
        if self.kind == "dflash":  # every row's argmax, then rows 1..K: a slice's argmax would copy the logits
            index = cuda_forward.argmax(logits, kernels)[:, 1:]
            return index if vocab is None else vocab.tokens(index)
        return self.markov_head.chain(logits, anchor, kernels, vocab)


def _config_from(kind: str, target: Qwen3Model, tensors: dict, folder: Path) -> BlockDraftConfig:
    """The draft's shape from its tensors, the tap layers and mask token from ``config.json`` when present."""
    cfg = target.config  # the target's depth and width: what the taps index
    meta = {}
    if (folder / "config.json").exists():
        meta = json.loads((folder / "config.json").read_text())
    dcfg = meta.get("dflash_config", {})
    if "fc.weight" not in tensors:
        raise EngineError(f"--draft-weights {folder}: no fc.weight (not a DFlash/DSpark draft)")
    num_taps = tensors["fc.weight"].shape[1] // cfg.hidden_size
    layers = {int(k.split(".")[1]) for k in tensors if k.startswith("layers.")}
    taps = tuple(dcfg.get("target_layer_ids") or meta.get("target_layer_ids") or tap_layers(cfg.num_layers, num_taps))
    if len(taps) != num_taps or max(taps) >= cfg.num_layers - 1 or min(taps) < 0:
        raise EngineError(
            f"--draft-weights {folder}: tap layers {list(taps)} do not fit fc.weight "
            f"({num_taps} x {cfg.hidden_size}) and a {cfg.num_layers}-layer target"
        )
    mask = dcfg.get("mask_token_id", meta.get("mask_token_id", cfg.vocab_size - 1))
    rank = tensors["markov_head.w1.weight"].shape[1] if "markov_head.w1.weight" in tensors else 0
    if kind == "dspark" and not rank:
        raise EngineError(f"--draft-weights {folder}: a DSpark draft needs markov_head.w1.weight / w2.weight")
    if not 0 <= int(mask) < cfg.vocab_size:
        raise EngineError(f"--draft-weights {folder}: mask_token_id {mask} is outside the vocabulary")
    return BlockDraftConfig(kind, len(layers), taps, int(mask), rank if kind == "dspark" else 0)
