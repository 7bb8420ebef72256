"""``specgen generate``: decode given prompts with a model preset or a local Hugging Face Qwen3 folder.

    $ specgen generate --model ./Qwen3-0.6B --prompt-ids 1,2,3 --prompt-ids 7,8 --max-new-tokens 16
    prompt 0: 1,2,3 -> 311,4,...
    ...
    acceptance 0.41, 32 tokens in 0.52 s (61.5 tokens/s), mode baseline, mtp draft, depth 3

``--json`` prints one object instead (``outputs``, ``acceptance``, ``tokens_per_s``, ...).  Modes
that run built kernels (``specgen``) take the build folder with ``--kernels``.
"""

from __future__ import annotations

import json
import time

from .common import UsageError, int_list


def register(sub) -> None:
    p = sub.add_parser("generate", help="greedy speculative decoding of given prompts with a model")
    p.add_argument("--model", default="tiny", metavar="PRESET|DIR", help="a model preset or a Hugging Face folder")
    p.add_argument(
        "--prompt-ids",
        action="append",
        required=True,
        metavar="IDS",
        help="one prompt's token ids, e.g. 1,2,3 (repeat the option for a batch)",
    )
    p.add_argument("--max-new-tokens", type=int, default=32, metavar="N", help="tokens to generate per prompt")
    p.add_argument("--mode", default="baseline", help="boundary mode (default baseline)")
    p.add_argument("--depth", type=int, default=3, metavar="K", help="drafts per step (verify width K + 1)")
    p.add_argument("--draft", default="mtp", help="draft kind: mtp (default), dflash or dspark")
    p.add_argument("--draft-weights", metavar="DIR", help="a DFlash / DSpark draft folder (default: random)")
    p.add_argument("--kernels", metavar="DIR", help="kernel build folder, for modes that run built kernels")
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="the model's dtype")
    p.add_argument("--seed", type=int, default=0, help="seed of random weights (presets, a random draft)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _setup(args):
    """``(model, draft, library)`` for the arguments; every bad value is a ``UsageError``."""
    import torch

    from ..bench.support import MODEL_PRESETS, BenchError, check_device, check_model, model_config
    from ..engine.draft_kinds import DRAFT_KINDS
    from ..engine.modes import MODES
    from ..models import EngineError, Qwen3Model

    why = check_model(args.model)
    if why:
        raise UsageError(why)
    if args.draft not in DRAFT_KINDS:
        raise UsageError(f"unknown --draft '{args.draft}' (known: {', '.join(DRAFT_KINDS)})")
    if args.mode not in MODES:
        raise UsageError(f"unknown --mode '{args.mode}' (known: {', '.join(MODES)})")
    if args.depth < 1 or args.max_new_tokens < 1:
        raise UsageError("--depth and --max-new-tokens must be at least 1")
    dtype = getattr(torch, args.dtype)
    try:
        device = check_device(args.device)
        config = model_config(args.model)
        if args.model in MODEL_PRESETS:
            model = Qwen3Model.create(config, seed=args.seed, dtype=dtype, device=device)
        else:
            model = Qwen3Model.from_pretrained(args.model, dtype=dtype, device=device)
        draft = DRAFT_KINDS[args.draft].create(model, seed=args.seed + 1, weights=args.draft_weights)
    except (BenchError, EngineError) as e:
        raise UsageError(str(e)) from None
    except (KeyError, ValueError, FileNotFoundError) as e:
        raise UsageError(f"--model {args.model}: {str(e).strip(chr(34) + chr(39))}") from None
    library = None
    if MODES[args.mode].needs_library:
        if not args.kernels:
            raise UsageError(f"--mode {args.mode} runs built kernels: give their folder with --kernels DIR")
        from ..runtime.library import load_library

        library = load_library(args.kernels)
    return model, draft, library


def run(args) -> int:
    prompts = [int_list(text, "--prompt-ids") for text in args.prompt_ids]
    model, draft, library = _setup(args)
    vocab = model.config.vocab_size
    bad = [t for p in prompts for t in p if not 0 <= t < vocab]
    if bad:
        raise UsageError(f"--prompt-ids: token {bad[0]} is outside the vocabulary (0..{vocab - 1})")
    from ..engine import SpecDecodeEngine
    from ..models import EngineError

    width, n, block_size = args.depth + 1, args.max_new_tokens, 16
    positions = max(map(len, prompts)) + n + 3 * width + 2
    try:
        engine = SpecDecodeEngine(
            model,
            draft,
            mode=args.mode,
            width=width,
            batch=len(prompts),
            block_size=block_size,
            block_table_width=-(-positions // block_size),
            library=library,
        )
        t = time.perf_counter()
        res = engine.run(prompts, max_new_tokens=n)
        wall = time.perf_counter() - t
    except EngineError as e:
        raise UsageError(str(e)) from None
    outputs = [o[:n] for o in res.outputs]
    tokens = sum(map(len, outputs))
    doc = {
        "model": args.model,
        "mode": args.mode,
        "draft": args.draft,
        "depth": args.depth,
        "prompts": prompts,
        "outputs": outputs,
        "acceptance": res.acceptance,
        "tokens": tokens,
        "seconds": wall,
        "tokens_per_s": tokens / wall if wall > 0 else None,
    }
    if args.json:
        print(json.dumps(doc))
        return 0
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        print(f"prompt {i}: {','.join(map(str, p))} -> {','.join(map(str, o))}")
    rate = f"{doc['tokens_per_s']:.1f}" if doc["tokens_per_s"] else "-"
    print(
        f"acceptance {res.acceptance:.2f}, {tokens} tokens in {wall:.2f} s ({rate} tokens/s), "
        f"mode {args.mode}, {args.draft} draft, depth {args.depth}"
    )
    return 0
