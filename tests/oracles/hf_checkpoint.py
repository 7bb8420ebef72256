"""Hugging Face Qwen3 folders written by transformers itself, and transformers' own greedy tokens.

``hf_folder`` builds a seeded float32 ``Qwen3ForCausalLM`` of tiny shapes and
``save_pretrained``s it (``config.json`` with ``rope_parameters``, safetensors);
``hf_greedy`` is its ``generate(do_sample=False)``; ``word_tokenizer`` adds a
``tokenizer.json`` whose tokens are the words ``w0 .. w{vocab-1}``.  The callers
``pytest.importorskip`` transformers (and tokenizers) first.
"""

from __future__ import annotations

import math

import torch

__all__ = ["VOCAB", "hf_folder", "hf_greedy", "word_tokenizer"]

VOCAB = 256


def hf_folder(folder, tied: bool = False, rope_theta: float = 5e5, seed: int = 0):
    """A seeded float32 ``Qwen3ForCausalLM`` saved to ``folder``; returns the model."""
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        tie_word_embeddings=tied,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
    )
    torch.manual_seed(seed)
    model = transformers.Qwen3ForCausalLM(config).float().eval()
    gen = torch.Generator().manual_seed(seed)
    # weights with a wide logit spread, so greedy choices are not near ties; small embeddings, so the
    # residual stream is not dominated by the input token (with tied weights it would predict itself)
    embed_std = 0.05
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name == "model.norm.weight":  # a logit spread of about 4
                p.fill_(4.0 / (embed_std * math.sqrt(p.shape[0])) if tied else 4.0)
            elif name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(embed_std * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.save_pretrained(folder)
    return model


def hf_greedy(model, prompts: list[list[int]], n: int) -> list[list[int]]:
    """transformers' greedy decoding of each prompt alone: ``n`` new tokens."""
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            seq = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n)
            out.append(seq[0, len(p) :].tolist())
    return out


def word_tokenizer(folder, vocab: int = VOCAB) -> None:
    """``folder/tokenizer.json``: token ``i`` is the word ``w{i}``, words split at whitespace."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(vocab)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins the words with spaces
    tok.save(str(folder / "tokenizer.json"))
