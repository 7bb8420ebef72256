"""How long a prefill chunk takes: the target forward over ``n`` new rows from position 0, run eagerly as the
serving loop runs it, with the kernels that take the time.

    python3 benchmarks/prefill_speed.py --model qwen3-0.6b --dtype float32 --rows 256,1024,2048 \\
        --out prefill_speed.json

For each row count: the median wall time of the forward (device synchronized before and after, ``--repeats``
times after a warm-up), the device time its kernels took in one profiled run (their total, and the share of
the wall time), the kernels by total time, and the LM head over every row against over the last row alone
(all a prefill needs; the timed forward runs it over the last row, as the loop does), and one layer's
attention each way it could run (the Triton paged kernel, the dense SDPA backends) with its error.  On the
CPU it runs the same forward (no kernel list).  Prints one line per row count; ``--out`` writes the JSON
with the command.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from specgen.engine.clock import median_wall_us
from specgen.models import ModelConfig, Qwen3Model
from specgen.models.qwen3_5 import Qwen35Model
from specgen.runtime.semantics import slot

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def prefill_inputs(n: int, block_size: int, vocab: int, dev: torch.device) -> tuple:
    """A prefill of ``n`` rows from position 0 over blocks ``1 ..`` (block 0 is the scratch block)."""
    blocks = -(-n // block_size)
    bt = torch.arange(1, blocks + 1, dtype=torch.int32, device=dev)[None]
    pos = torch.arange(n, device=dev)
    toks = torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(n)).to(dev)
    slots = slot(bt, pos[None], block_size).reshape(-1)
    kv = torch.tensor([n], device=dev)
    qsl = torch.tensor([0, n], device=dev)
    return toks, pos, slots, bt, kv, qsl, n


def kernel_table(fn, dev: torch.device, top: int) -> tuple[float, list]:
    """One profiled call of ``fn``: the kernels' total device time (us) and the ``top`` kernels by it."""
    acts = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        _sync(dev)
    rows = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    rows.sort(key=lambda e: -e.self_device_time_total)
    total = sum(e.self_device_time_total for e in rows)
    table = [{"kernel": e.key[:90], "us": round(e.self_device_time_total, 1), "calls": e.count} for e in rows[:top]]
    return total, table


def attention_options(model, n: int, block_size: int, dev: torch.device, repeats: int) -> list[dict]:
    """One layer's causal attention over a chunk of ``n`` rows from position 0, each way it could run:
    the Triton paged kernel the forward launches (keys read through the block table) and the dense
    ``scaled_dot_product_attention`` backends on the chunk's own K/V; each one's median time (us) and
    largest difference from a float64 reference."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from specgen.models.triton_attention import paged_attention

    cfg, dt = model.config, model.embed_tokens.weight.dtype
    H, KVH, D = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    g = torch.Generator(device=dev).manual_seed(n)
    q, k, v = (torch.randn(n, h, D, generator=g, device=dev, dtype=dt) for h in (H, KVH, KVH))
    _, pos, slots, bt, kv, qsl, _ = prefill_inputs(n, block_size, cfg.vocab_size, dev)
    kc, vc = model.kv_cache.layer_storage(0)
    model.kv_cache.write(0, slots, k, v)
    dense = [t.transpose(0, 1)[None] for t in (q, k, v)]  # [1, heads, n, D]
    ref = F.scaled_dot_product_attention(*(t.double() for t in dense), is_causal=True, enable_gqa=True)
    ref = ref[0].transpose(0, 1)
    ways = {"triton_paged": lambda: paged_attention(q, kc, vc, bt, kv, pos, qsl, n, block_size)}
    for name, backend in (
        ("sdpa_math", SDPBackend.MATH),
        ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION),
        ("sdpa_flash", SDPBackend.FLASH_ATTENTION),
        ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
    ):

        def way(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(*dense, is_causal=True, enable_gqa=True)[0].transpose(0, 1)

        ways[name] = way
    out = []
    for name, fn in ways.items():
        try:
            err = (fn().double() - ref).abs().max().item()
            us = median_wall_us(fn, dev, repeats)
        except RuntimeError as e:  # a backend that does not take this dtype or device
            out.append({"impl": name, "error": str(e).splitlines()[0][:120]})
            continue
        out.append({"impl": name, "us": round(us, 1), "max_err": err})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--rows", default="256,1024,2048")
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # as the serving benchmark's float32 runs
    rows = [int(x) for x in args.rows.split(",")]
    cfg = ModelConfig.preset(args.model) if not args.model.startswith("qwen3.5") else None
    cls = Qwen3Model if cfg is not None else Qwen35Model
    model = cls.create(args.model, seed=0, dtype=DTYPES[args.dtype], device=dev)
    blocks = -(-max(rows) // args.block_size)
    model.allocate_kv_cache(blocks + 1, args.block_size, block_table_width=blocks)
    if hasattr(model, "allocate_linear_state"):
        model.allocate_linear_state(2)
    vocab = model.config.vocab_size
    results = []
    for n in rows:
        inputs = prefill_inputs(n, args.block_size, vocab, dev)

        state = {}
        if cls is Qwen35Model:  # from the zero state; the last row's state into slot 0
            write = torch.full((n,), -1, dtype=torch.int32, device=dev)
            write[-1:].fill_(0)
            state = {"state_read": torch.tensor([-1], dtype=torch.int32, device=dev), "state_write": write}

        def fn(inputs=inputs, state=state, n=n) -> None:  # the LM head over the last row, as the loop runs it
            model(*inputs, logit_rows=slice(n - 1, n), **state)

        with torch.inference_mode():
            wall_us = median_wall_us(fn, dev, args.repeats)  # after a warm-up: JIT compiles, the allocator
            total, table = kernel_table(fn, dev, args.top) if dev.type == "cuda" else (None, [])
            # what the LM head over every row costs against the last row alone (all a prefill needs)
            hidden = model(*inputs, **state)[0]
            head_us = [median_wall_us(lambda h=h: model.logits(h), dev, args.repeats) for h in (hidden, hidden[-1:])]
            attention = attention_options(model, n, args.block_size, dev, args.repeats) if dev.type == "cuda" else []
        r = {
            "rows": n,
            "wall_us": round(wall_us, 1),
            "kernel_us": None if total is None else round(total, 1),
            "kernel_share": None if total is None else round(total / wall_us, 3),
            "tokens_per_s": round(n / (wall_us / 1e6)),
            "lm_head_all_rows_us": round(head_us[0], 1),
            "lm_head_last_row_us": round(head_us[1], 1),
            "kernels": table,
            "attention": attention,
        }
        results.append(r)
        share = "" if total is None else f", kernels {total / 1e3:.1f} ms ({total / wall_us:.0%} of it)"
        print(
            f"{args.model} {args.dtype} prefill of {n} rows: {wall_us / 1e3:.1f} ms{share}; the LM head over every "
            f"row {head_us[0] / 1e3:.1f} ms, over the last {head_us[1] / 1e3:.2f} ms",
            flush=True,
        )
        for k in table[:5]:
            print(f"    {k['us'] / 1e3:8.2f} ms  {k['calls']:5d}x  {k['kernel']}")
        for a in attention:
            took = f"{a['us'] / 1e3:8.3f} ms, max err {a['max_err']:.2e}" if "us" in a else a["error"]
            print(f"    one layer's attention, {a['impl']}: {took}")
    if args.out:
        words = argv if argv is not None else sys.argv[1:]
        out = {"command": "python3 benchmarks/prefill_speed.py " + " ".join(words), "device": str(dev)}
        if dev.type == "cuda":
            out["gpu"] = torch.cuda.get_device_name(dev)
        out.update(model=args.model, dtype=args.dtype, results=results)
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
