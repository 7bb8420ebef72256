"""Measure the skinny GEMM's tiles on a model's weight shapes (CUDA) and print the ``TUNED`` table.

For every distinct ``[N, K]`` weight a decode or verify step multiplies with at
most 16 rows (the hybrid's fused projections, its MTP head's, or a dense
Qwen3's), every config of a small grid (tile width, K step, splits where the
consumer sums partials, warps, stages) is timed at each row count: a CUDA
graph of ``--launches`` back-to-back products, replayed ``--repeats`` times,
the median per product.  The products cycle through copies of the weight
that together exceed the L2 cache (``--cold-mb``), so every product streams
its weight from memory as a forward's does.  cuBLAS (``F.linear``) and the current default
(``skinny_gemm.config_for``) are timed beside them.  A config is kept only
if its result matches ``x @ w.T``.  Writes JSON (every timing, the best config
per shape, the table ``models/skinny_gemm.py`` takes) and prints the table.

With ``--lm-head`` the LM head may take more rows (up to
``skinny_gemm.MAX_HEAD_ROWS``: ``cuda_forward.lm_head``); past 16 rows it is
timed by cuBLAS and the default alone (the grid and the table are the rows up
to 16's), and the other shapes skip those row counts.

    python3 benchmarks/skinny_gemm_sweep.py --model qwen3.5-2b --rows 1,2,4,8,16 --out sweep.json
    python3 benchmarks/skinny_gemm_sweep.py --model qwen3-0.6b --lm-head --rows 1,4,8,32,128 --out head.json

With ``--tall`` every shape takes the rows past 16 too (a verify step of 8 sequences at W = 4 has 32), each
against cuBLAS with the default tall tile and a small grid of wider ones (``tall_grid``); the table stays the
rows up to 16's, and the JSON's ``tall`` holds each shape's best config per row count past 16.  Its
``tall_table`` (printed as ``TUNED_TALL``) keeps a shape's best config at the most rows up to
``skinny_gemm.TALL_ROWS`` where it beats cuBLAS by at least ``TALL_MARGIN``; the other shapes stay cuBLAS's.

    python3 benchmarks/skinny_gemm_sweep.py --model qwen3.5-2b --tall --rows 32,64 --out tall.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

TALL_MARGIN = 0.03  # a tall config enters tall_table only this much faster than cuBLAS (timing noise is ~1%)


def shapes(model: str, lm_head: bool = False) -> list[tuple[str, int, int, bool]]:
    """``(name, N, K, partial)`` of the model's skinny products (partial: the consumer sums split-K partials);
    ``lm_head``: the LM head's too (a draft's and a verify step's logits, cuBLAS in the forwards today)."""
    head = []
    if lm_head:
        from specgen.models.qwen3 import PRESETS as DENSE
        from specgen.models.qwen3_5_config import PRESETS as HYBRID

        c = (HYBRID if model.startswith("qwen3.5") else DENSE)[model]
        head = [("lm_head", c.vocab_size, c.hidden_size, False)]
    if model.startswith("qwen3.5"):
        from specgen.models.qwen3_5_config import PRESETS

        c = PRESETS[model]
        h, i = c.hidden_size, c.intermediate_size
        vd = c.linear_num_value_heads * c.linear_value_head_dim
        attn = 2 * c.num_heads * c.head_dim + 2 * c.num_kv_heads * c.head_dim
        return [
            ("linear in_proj", c.conv_dim + vd + 2 * c.linear_num_value_heads, h, False),
            ("linear out_proj", h, vd, True),
            ("attention qkv+gate", attn, h, False),
            ("attention o_proj", h, c.num_heads * c.head_dim, True),
            ("mlp gate_up", 2 * i, h, False),
            ("mlp down", h, i, True),
            ("mtp fc", h, 2 * h, False),
            *head,
        ]
    from specgen.models.qwen3 import PRESETS as DENSE

    c = DENSE[model]
    h, i = c.hidden_size, c.intermediate_size
    return [
        ("qkv", (c.num_heads + 2 * c.num_kv_heads) * c.head_dim, h, False),
        ("o_proj", h, c.num_heads * c.head_dim, True),
        ("gate_up", 2 * i, h, False),
        ("down", h, i, True),
        *head,
    ]


def grid(partial: bool):
    from specgen.models.skinny_gemm import Config

    for bn, bk, warps, stages in itertools.product((16, 32, 64), (128, 256), (4, 8), (3, 4, 5)):
        if bn == 16 and warps == 8:
            continue
        for splits in (1, 2, 4, 8) if partial else (1,):
            yield Config(bn, bk, splits, warps, stages)


def tall_grid(partial: bool):
    """The configs timed past 16 rows (``--tall``): wider tiles and shorter K steps than the decode grid's."""
    from specgen.models.skinny_gemm import Config

    for bn, bk, warps in ((32, 128, 4), (64, 64, 4), (64, 128, 4), (128, 64, 8), (128, 64, 4)):
        for splits in (1, 2, 4) if partial else (1,):
            yield Config(bn, bk, splits, warps, 4)


def tall_table(tall_best: dict, limit: int) -> dict:
    """``"N,K,partial" -> config`` from ``tall_best`` (``{shape: {rows: [config, us, cublas_us]}}``): each shape's
    best config at its most rows up to ``limit``, where that beat cuBLAS by ``TALL_MARGIN``."""
    table = {}
    for key, by_rows in tall_best.items():
        within = {int(m): rec for m, rec in by_rows.items() if int(m) <= limit}  # a JSON file's row keys are strings
        if within:
            cfg, us, cublas = within[max(within)]
            if us <= cublas * (1 - TALL_MARGIN):
                table[key] = list(cfg)
    return table


def time_graph(fn, launches: int, repeats: int) -> float:
    """Median microseconds per call of ``fn(i)``, ``launches`` calls (``i = 0 ..``) per graph replay."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(launches):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / launches)
    del g
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3.5-2b")
    ap.add_argument("--rows", default="1,2,4,8,16")
    ap.add_argument("--launches", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--cold-mb", type=int, default=512, help="weight copies cycled through, in MB (0: one, L2-hot)")
    ap.add_argument("--lm-head", action="store_true", help="the LM head's shape too (vocabulary x hidden)")
    ap.add_argument("--tall", action="store_true", help="every shape past 16 rows too, against cuBLAS (tall_grid)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    from specgen.models.skinny_gemm import (
        MAX_HEAD_ROWS,
        MAX_ROWS,
        TALL_ROWS,
        block_rows,
        config_for,
        skinny_gemm,
        tall,
    )

    rows = [int(r) for r in a.rows.split(",")]
    if max(rows) > MAX_HEAD_ROWS:
        ap.error(f"--rows: at most {MAX_HEAD_ROWS}")
    dev = torch.device("cuda")
    results, table, tall_best, seen = [], {}, {}, set()
    t0 = time.time()
    for name, n, k, partial in shapes(a.model, a.lm_head):
        shape_rows = [m for m in rows if m <= MAX_ROWS or name == "lm_head" or a.tall]
        if (n, k, partial) in seen or not shape_rows:  # the same weight shape under another name, or no rows
            continue
        seen.add((n, k, partial))
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k**0.5
        ws = [w] + [w.clone() for _ in range(max(0, -(-a.cold_mb * 10**6 // (n * k * 2)) - 1))]
        per_cfg: dict = {}
        for m in shape_rows:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            want = x.float() @ w.float().T
            rec = {"shape": name, "n": n, "k": k, "m": m, "partial": partial, "mb": n * k * 2 / 1e6}
            rec["cublas_us"] = time_graph(lambda i: F.linear(x, ws[i % len(ws)]), a.launches, a.repeats)
            rec["default"] = list(tall(config_for(n, k, partial), block_rows(m)))
            rec["default_us"] = time_graph(lambda i: skinny_gemm(x, ws[i % len(ws)], partial), a.launches, a.repeats)
            rec["weight_copies"] = len(ws)
            results.append(rec)
            tall_rows = m > MAX_ROWS and a.tall and name != "lm_head"  # past 16 rows: a few wider tiles
            if m > MAX_ROWS and not tall_rows:  # the head's tall tiles: cuBLAS against the default only
                print(
                    f"{name:20s} N={n:6d} K={k:5d} M={m:3d}: cublas {rec['cublas_us']:6.1f} us, default "
                    f"{rec['default_us']:6.1f} us {tuple(rec['default'])}  [{time.time() - t0:.0f} s]",
                    flush=True,
                )
                continue
            timings = {}
            for cfg in tall_grid(partial) if tall_rows else grid(partial):
                got = skinny_gemm(x, w, partial, cfg)
                got = got.sum(0) if got.dim() == 3 else got
                if (got.float() - want).abs().max().item() > 5e-2 * want.abs().max().item():
                    continue
                us = time_graph(lambda i, c=cfg: skinny_gemm(x, ws[i % len(ws)], partial, c), a.launches, a.repeats)
                timings[cfg] = us
                if not tall_rows:  # the table is the rows up to 16's
                    per_cfg.setdefault(cfg, []).append(us)
            best = min(timings, key=timings.get)
            rec["best"], rec["best_us"] = list(best), timings[best]
            rec["best_tbps"] = n * k * 2 / (timings[best] * 1e-6) / 1e12
            if tall_rows:
                tall_best.setdefault(f"{n},{k},{partial}", {})[m] = [list(best), timings[best], rec["cublas_us"]]
            print(
                f"{name:20s} N={n:6d} K={k:5d} M={m:3d}: cublas {rec['cublas_us']:6.1f} us, default "
                f"{rec['default_us']:6.1f} us, best {timings[best]:6.1f} us {tuple(best)} "
                f"({rec['best_tbps']:.2f} TB/s)  [{time.time() - t0:.0f} s]",
                flush=True,
            )
        # one config per shape: the least total time over the row counts of at most 16
        whole = {c: sum(v) for c, v in per_cfg.items() if len(v) == sum(m <= MAX_ROWS for m in shape_rows)}
        if whole:
            table[f"{n},{k},{partial}"] = list(min(whole, key=whole.get))
    out = {
        "tall_table": tall_table(tall_best, TALL_ROWS),
        "command": "python3 benchmarks/skinny_gemm_sweep.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "model": a.model,
        "rows": rows,
        "cold_mb": a.cold_mb,
        "results": results,
        "table": table,
        "tall": tall_best,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print_table("TUNED", table)
    if a.tall:
        print_table("TUNED_TALL", out["tall_table"])
    return 0


def print_table(name: str, table: dict) -> None:
    """``table`` (``"N,K,partial" -> config``) as the ``models/skinny_gemm.py`` dict ``name``."""
    print(f"{name} = {{")
    for key, cfg in table.items():
        n, k, partial = key.split(",")
        print(f"    ({n}, {k}, {partial}): Config{tuple(cfg)},")
    print("}")


if __name__ == "__main__":
    raise SystemExit(main())
