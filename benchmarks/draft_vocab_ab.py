"""A reduced draft vocabulary against the whole one: a table and a picture from two recorded benches.

    python benchmarks/draft_vocab_ab.py WHOLE.json SUBSET.json [--out draft_vocab.png]

``WHOLE.json`` and ``SUBSET.json`` are ``bench.json`` files of the same ``specgen bench`` command without and
with ``--draft-vocab`` (e.g. ``results/hybrid/85237b5_h200/repeats3/``). Per batch and mode it prints both
TPOTs and the change; where the runs were profiled (``kernel_breakdown``) it also gives the draft's device
time per step, its matmuls and (a sampling draft's draws) its vocabulary pass. The picture (matplotlib) shows
the TPOTs side by side per batch and mode.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def _runs(path: Path) -> tuple[dict, dict[tuple[int, str], dict]]:
    doc = json.loads(Path(path).read_text())
    return doc, {(r["batch"], r["mode"]): r for r in doc["runs"] if "error" not in r}


def _draft_us(run: dict) -> tuple[float, float, float] | None:
    """``(draft device us, of it matmuls, of it the vocabulary pass)`` per step from a profiled run's
    ``kernel_breakdown`` (a sampling draft's draws are its vocabulary pass), else None."""
    parts = (run.get("kernel_breakdown") or {}).get("parts", {})
    draft = parts.get("draft")
    return (sum(draft.values()), draft.get("matmul", 0.0), draft.get("vocabulary pass", 0.0)) if draft else None


def compare(whole_path: Path, subset_path: Path) -> tuple[list[dict], int]:
    """Per (batch, mode) both benches ran: TPOTs, the change, the draft's device time; and the subset's size."""
    whole_doc, whole = _runs(whole_path)
    subset_doc, subset = _runs(subset_path)
    if whole_doc.get("draft_vocab") is not None or subset_doc.get("draft_vocab") is None:
        raise SystemExit("give the bench without --draft-vocab first, then the one with it")
    rows = []
    for key in sorted(set(whole) & set(subset)):
        w, s = whole[key], subset[key]
        row = {"batch": key[0], "mode": key[1], "whole_tpot_ms": w["tpot_ms"], "subset_tpot_ms": s["tpot_ms"]}
        row["change"] = s["tpot_ms"] / w["tpot_ms"] - 1
        if _draft_us(w) and _draft_us(s):
            row["whole_draft_us"], row["whole_draft_matmul_us"], row["whole_draft_vocab_us"] = _draft_us(w)
            row["subset_draft_us"], row["subset_draft_matmul_us"], row["subset_draft_vocab_us"] = _draft_us(s)
        rows.append(row)
    return rows, subset_doc["draft_vocab"]


def table(rows: list[dict], size: int) -> str:
    sampled = any(r.get("whole_draft_vocab_us") or r.get("subset_draft_vocab_us") for r in rows)
    parts = "matmuls; vocabulary pass" if sampled else "matmuls"
    out = [f"| B | mode | TPOT ms, whole | TPOT ms, {size} ids | change | draft us ({parts}), whole -> subset |"]
    out.append("|--:|---|--:|--:|--:|---|")

    def cell(r: dict, which: str) -> str:
        inner = f"{r[which + '_draft_matmul_us']:.0f}" + (f"; {r[which + '_draft_vocab_us']:.0f}" if sampled else "")
        return f"{r[which + '_draft_us']:.0f} ({inner})"

    for r in rows:
        draft = f"{cell(r, 'whole')} -> {cell(r, 'subset')}" if "whole_draft_us" in r else "-"
        out.append(
            f"| {r['batch']} | {r['mode']} | {r['whole_tpot_ms']:.4f} | {r['subset_tpot_ms']:.4f} | "
            f"{100 * r['change']:+.1f}% | {draft} |"
        )
    return "\n".join(out)


def plot(rows: list[dict], size: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = sorted({r["batch"] for r in rows})
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    fig, axes = plt.subplots(1, len(batches), figsize=(4 * len(batches), 3.6), squeeze=False)
    for ax, b in zip(axes[0], batches):
        here = {r["mode"]: r for r in rows if r["batch"] == b}
        xs = range(len(modes))
        ax.bar([x - 0.2 for x in xs], [here[m]["whole_tpot_ms"] for m in modes], 0.4, label="whole vocabulary")
        ax.bar([x + 0.2 for x in xs], [here[m]["subset_tpot_ms"] for m in modes], 0.4, label=f"{size} ids")
        ax.set_xticks(list(xs), modes)
        ax.set_title(f"B = {b}")
        ax.set_ylabel("TPOT ms")
    axes[0][0].legend(loc="lower left", fontsize=8)
    fig.suptitle("the draft's LM head over a subset of the ids (--draft-vocab)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("whole", type=Path, help="bench.json without --draft-vocab")
    p.add_argument("subset", type=Path, help="bench.json with --draft-vocab")
    p.add_argument("--out", type=Path, help="the picture (PNG); none without it")
    args = p.parse_args(argv)
    rows, size = compare(args.whole, args.subset)
    print(table(rows, size))
    if args.out:
        plot(rows, size, args.out)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
