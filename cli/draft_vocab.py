"""``specgen draft-vocab``: a frequency-ranked reduced draft vocabulary, counted over a corpus.

The MTP draft's LM head over a subset of the ids (``--draft-vocab FILE`` in ``bench``, ``serve-bench`` and
``generate``) loses acceptance on the tokens it leaves out; ranking the ids by how often they occur in
traffic like the user's (FR-Spec's choice) keeps that loss small.  This command tallies a corpus, given as
text through the model folder's ``tokenizer.json`` or as token ids already, and writes the ``N`` most frequent
ids with the share of the corpus's tokens they cover, an upper bound on the share of drafts the subset
can still propose::

    specgen draft-vocab --model DIR --size 32768 --text corpus.txt --out ids.json
    specgen generate --model DIR --draft-vocab ids.json --prompt "..."
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

from .common import UsageError


def register(sub) -> None:
    p = sub.add_parser(
        "draft-vocab", help="rank a model's token ids by their frequency in a corpus (a file for --draft-vocab)"
    )
    p.add_argument("--model", default="tiny", metavar="PRESET|DIR", help="the model whose vocabulary is ranked")
    p.add_argument("--size", type=int, required=True, metavar="N", help="ids to keep")
    p.add_argument(
        "--text",
        action="append",
        default=[],
        metavar="FILE",
        help="a text file, one document per line, through the folder's tokenizer.json (repeat for more)",
    )
    p.add_argument(
        "--token-ids",
        action="append",
        default=[],
        metavar="FILE",
        help="a JSON file of token-id lists, e.g. logged prompts and outputs (repeat for more)",
    )
    p.add_argument("--out", required=True, metavar="FILE", help="the JSON file written, for --draft-vocab")
    p.set_defaults(func=run)


def _id_lists(path: str) -> list[list[int]]:
    """A ``--token-ids`` file's lists of ids (a single flat list counts as one)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"--token-ids {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise UsageError(f"--token-ids {path}: not JSON ({e})") from None
    if isinstance(data, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in data):
        data = [data]
    ok = isinstance(data, list) and all(
        isinstance(row, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in row) for row in data
    )
    if not ok:
        raise UsageError(f"--token-ids {path}: expected a list of token-id lists")
    return data


LINES_PER_BATCH = 4096  # text lines tokenized at once
PROGRESS_BATCHES = 64  # a progress line every this many batches of a text file


def _text_batches(path: str, tokenizer):
    """A ``--text`` file's non-empty lines, tokenized ``LINES_PER_BATCH`` at a time (a corpus larger than memory
    streams), with a progress line on standard error every ``PROGRESS_BATCHES`` batches."""
    lines, batches = [], 0
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    lines.append(line.rstrip("\n"))
                if len(lines) == LINES_PER_BATCH:
                    yield [enc.ids for enc in tokenizer.encode_batch(lines)]
                    lines, batches = [], batches + 1
                    if batches % PROGRESS_BATCHES == 0:
                        print(f"draft-vocab: {path}: {batches * LINES_PER_BATCH} lines so far", file=sys.stderr)
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--text {path}: {getattr(e, 'strerror', None) or e}") from None
    if lines:
        yield [enc.ids for enc in tokenizer.encode_batch(lines)]


def run(args) -> int:
    import torch

    from ..bench.support import BenchError, model_config
    from ..models.draft_vocab import frequency_ranked
    from .generate import _tokenizer

    if not args.text and not args.token_ids:
        raise UsageError("draft-vocab counts a corpus: give --text FILE or --token-ids FILE")
    try:
        vocab = model_config(args.model).vocab_size
    except BenchError as e:
        raise UsageError(str(e)) from None
    if not 1 <= args.size <= vocab:
        raise UsageError(f"--size {args.size}: the model's vocabulary holds {vocab} ids (1 to {vocab})")
    tokenizer = _tokenizer(SimpleNamespace(model=args.model), needed=bool(args.text), option="--text")
    counts = torch.zeros(vocab, dtype=torch.int64)
    sources = [("--token-ids", p) for p in args.token_ids] + [("--text", p) for p in args.text]
    for option, path in sources:
        before, sequences = int(counts.sum()), 0
        for lists in [_id_lists(path)] if option == "--token-ids" else _text_batches(path, tokenizer):
            ids = torch.tensor([t for row in lists for t in row], dtype=torch.int64)
            bad = ids[(ids < 0) | (ids >= vocab)]
            if bad.numel():
                raise UsageError(f"{option} {path}: token id {int(bad[0])} is outside the vocabulary (0..{vocab - 1})")
            counts += torch.bincount(ids, minlength=vocab)
            sequences += len(lists)
        print(f"draft-vocab: {path}: {int(counts.sum()) - before} tokens in {sequences} sequences", file=sys.stderr)
    total = int(counts.sum())
    if total == 0:
        raise UsageError("draft-vocab: the corpus holds no tokens")
    keep = frequency_ranked(counts, args.size)
    coverage = int(counts[keep].sum()) / total
    doc = {
        "ids": keep.tolist(),
        "size": args.size,
        "vocab_size": vocab,
        "model": args.model,
        "tokens_counted": total,
        "distinct_tokens": int((counts > 0).sum()),
        "coverage": coverage,  # the share of the corpus's tokens whose id is kept
        "sources": [{"option": o, "path": str(p)} for o, p in sources],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc) + "\n")
    print(
        f"kept {args.size} of {vocab} ids: they cover {100 * coverage:.2f}% of the {total} tokens counted "
        f"({doc['distinct_tokens']} distinct); wrote {out} (use --draft-vocab {out})"
    )
    return 0
