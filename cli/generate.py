"""``specgen generate``: decode given prompts with a model preset or a local Hugging Face Qwen3 / Qwen3.5 folder.

    $ specgen generate --model ./Qwen3-0.6B --prompt-ids 1,2,3 --prompt "The sky is" --max-new-tokens 16
    prompt 0: 1,2,3 -> 311,4,...
      text: ...
    ...
    acceptance 0.41, 32 tokens in 0.52 s (61.5 tokens/s), mode baseline, mtp draft, depth 3

``--prompt TEXT`` goes through the folder's ``tokenizer.json`` (the ``tokenizers``
package); with a tokenizer the outputs are printed as text too.  ``--json`` prints
one object instead (``outputs``, ``texts``, ``acceptance``, ``tokens_per_s``, ``runtime_stats``, ...).
``--temperature T`` (with ``--top-k``, ``--top-p``) samples: sampled verification, each
prompt's randoms keyed by ``--seed`` + its index, so a run is reproduced exactly.
Modes that run built kernels (``specgen``) take a build folder with ``--kernels``
(default ``build/bench_kernels``) and, as ``specgen bench`` does, build the layout
they need into it when it is missing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

from .common import UsageError, int_list

BLOCK_SIZE = 16


def register(sub) -> None:
    p = sub.add_parser("generate", help="speculative decoding of given prompts with a model, greedy or sampled")
    p.add_argument("--model", default="tiny", metavar="PRESET|DIR", help="a model preset or a Hugging Face folder")
    prompt = {"action": "append", "dest": "prompts", "default": []}
    p.add_argument(
        "--prompt-ids",
        type=lambda text: ("ids", text),
        metavar="IDS",
        help="one prompt's token ids, e.g. 1,2,3 (repeat the option for a batch)",
        **prompt,
    )
    p.add_argument(
        "--prompt",
        type=lambda text: ("text", text),
        metavar="TEXT",
        help="one prompt as text, through the folder's tokenizer.json (needs the tokenizers package)",
        **prompt,
    )
    p.add_argument("--max-new-tokens", type=int, default=32, metavar="N", help="tokens to generate per prompt")
    p.add_argument("--mode", default="baseline", help="boundary mode (default baseline)")
    p.add_argument("--depth", type=int, default=3, metavar="K", help="drafts per step (verify width K + 1)")
    p.add_argument("--draft", default="mtp", help="draft kind: mtp (default), dflash or dspark")
    p.add_argument("--draft-weights", metavar="DIR", help="a DFlash / DSpark draft folder (default: random)")
    p.add_argument(
        "--kernels", metavar="DIR", help="kernel build folder for modes that run built kernels (built when missing)"
    )
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="the model's dtype")
    p.add_argument("--temperature", type=float, default=0.0, help="sample at this temperature (0: greedy, the default)")
    p.add_argument("--top-k", type=int, default=0, metavar="K", help="sample from the K most probable tokens (0: all)")
    p.add_argument(
        "--top-p", type=float, default=1.0, metavar="P", help="sample from the top tokens of mass P (1: all)"
    )
    p.add_argument(
        "--draft-sampling",
        default="sample",
        choices=("sample", "argmax"),
        help="when sampling, the MTP draft draws from its own distribution (sample) or proposes its argmax",
    )
    p.add_argument(
        "--draft-vocab",
        metavar="N|FILE",
        help="the draft's LM head over the first N token ids, or over the ids a JSON file lists (drafts only "
        "from those; verification keeps the whole head)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of random weights (presets, a random draft) and of sampling (prompt i: seed + i)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _tokenizer(args, needed: bool, option: str = "--prompt"):
    """The folder's ``tokenizer.json`` as a ``tokenizers.Tokenizer``, or None where there is none.

    ``needed`` (``option``, a ``--prompt``, was given): its absence is a ``UsageError`` saying what to do instead.
    """
    instead = {"--prompt": "--prompt-ids", "--text": "--token-ids"}[option]
    from ..bench.support import MODEL_PRESETS

    path = None if args.model in MODEL_PRESETS else Path(args.model) / "tokenizer.json"
    if path is None or not path.is_file():
        if needed:
            where = f"--model {args.model} is a preset" if path is None else f"{Path(args.model)} has no tokenizer.json"
            raise UsageError(f"{option} needs a model folder with a tokenizer.json ({where}); use {instead}")
        return None
    try:
        from tokenizers import Tokenizer  # optional dependency
    except ImportError:
        if needed:
            raise UsageError(f"{option} needs the tokenizers package (pip install tokenizers); or use {instead}")
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # the tokenizers package raises its own exception types
        raise UsageError(f"{path}: not a tokenizer the tokenizers package reads ({str(e).splitlines()[0]})") from None


def _prompts(args, tokenizer) -> list[list[int]]:
    """Every ``--prompt-ids`` / ``--prompt`` in the order given, as token ids."""
    prompts = []
    for kind, text in args.prompts:
        if kind == "ids":
            prompts.append(int_list(text, "--prompt-ids"))
            continue
        ids = tokenizer.encode(text).ids
        if not ids:
            raise UsageError(f"--prompt {text!r}: the tokenizer gives no tokens")
        prompts.append(ids)
    return prompts


def _sampling(args, batch: int):
    """One ``SamplingParams`` per prompt (prompt ``i`` seeded ``--seed + i``), None at temperature 0 (greedy)."""
    from types import SimpleNamespace

    from ..bench.config_checks import _draft_sampling, _temperature, _top_k, _top_p
    from ..runtime.sampling import SamplingParams

    why = _temperature(args.temperature) or _top_k(args.top_k) or _top_p(args.top_p)
    settings = SimpleNamespace(temperature=args.temperature, draft=args.draft, acceptance=None)
    why = why or _draft_sampling(args.draft_sampling, settings)
    if why:
        raise UsageError(why)
    if args.temperature == 0:
        return None
    return [SamplingParams(args.temperature, args.top_k, args.top_p, args.seed + i) for i in range(batch)]


def _setup(args):
    """``(model, draft, device)`` for the arguments; every bad value is a ``UsageError``."""
    import torch

    from ..bench.support import MODEL_PRESETS, BenchError, check_device, create_target, model_config, restrict_draft
    from ..engine.draft_kinds import DRAFT_KINDS
    from ..engine.modes import MODES
    from ..models import EngineError

    if args.draft not in DRAFT_KINDS:
        raise UsageError(f"unknown --draft '{args.draft}' (known: {', '.join(DRAFT_KINDS)})")
    if args.mode not in MODES:
        raise UsageError(f"unknown --mode '{args.mode}' (known: {', '.join(MODES)})")
    if args.depth < 1 or args.max_new_tokens < 1:
        raise UsageError("--depth and --max-new-tokens must be at least 1")
    dtype = getattr(torch, args.dtype)
    try:
        device = check_device(args.device)
        if device.type != "cuda" and MODES[args.mode].cpu_skip_reason:
            raise UsageError(f"--mode {args.mode} {MODES[args.mode].cpu_skip_reason}; use baseline or specgen here")
        config = model_config(args.model)
        path = None if args.model in MODEL_PRESETS else args.model
        model = create_target(config, path, args.seed, dtype, device)
        draft = DRAFT_KINDS[args.draft].create(model, seed=args.seed + 1, weights=args.draft_weights)
        restrict_draft(draft, model, args.draft_vocab)  # --draft-vocab: the draft's LM head over a subset
    except (BenchError, EngineError) as e:
        raise UsageError(str(e)) from None
    except (KeyError, ValueError, FileNotFoundError) as e:
        raise UsageError(f"--model {args.model}: {str(e).strip(chr(34) + chr(39))}") from None
    return model, draft, device


def _kernels(args, width: int, positions: int, device, model_config) -> tuple:
    """``(library, block_table_width, block_size)``: a layout of the kernel folder that holds ``positions``,
    else a just-enough one, built into the folder when missing (as ``specgen bench`` does); the plans are
    those of the draft kind over the target of ``model_config`` (a hybrid's linear head)."""
    from ..bench.support import kernel_boundaries
    from ..engine.draft_kinds import DRAFT_KINDS
    from ..engine.modes import MODES
    from . import bench

    just_enough = -(-positions // BLOCK_SIZE)
    if not MODES[args.mode].needs_library:
        return None, just_enough, BLOCK_SIZE
    folder = Path(args.kernels or "build/bench_kernels")
    need = SimpleNamespace(
        kernel_target="cuda" if device.type == "cuda" else "c",
        widths=(width,),
        block_table_width=just_enough,
        block_size=BLOCK_SIZE,
        boundaries=kernel_boundaries(DRAFT_KINDS[args.draft].boundaries, model_config, args.temperature > 0),
    )
    if (folder / "manifest.json").is_file():
        lib = bench._library(folder)
        fits = [
            lay
            for lay in lib.manifest.layouts(need.boundaries[0])
            if lay.width == width
            and lay.draft_dtype == "int32"
            and lay.block_table_width * lay.block_size >= positions
            and bench._built_for(lib, lay, need.kernel_target, need.boundaries)
        ]
        if fits:
            best = min(fits, key=lambda lay: (lay.block_table_width * lay.block_size, lay.block_size))
            return lib, best.block_table_width, best.block_size
    return bench._ensure_kernels(str(folder), need, "generate"), just_enough, BLOCK_SIZE


def run(args) -> int:
    from ..bench.support import check_model

    if not args.prompts:
        raise UsageError("give at least one prompt: --prompt-ids 1,2,3 or --prompt TEXT")
    why = check_model(args.model)
    if why:
        raise UsageError(why)
    tokenizer = _tokenizer(args, needed=any(kind == "text" for kind, _ in args.prompts))
    prompts = _prompts(args, tokenizer)
    sampling = _sampling(args, len(prompts))
    model, draft, device = _setup(args)
    vocab = model.config.vocab_size
    bad = [t for p in prompts for t in p if not 0 <= t < vocab]
    if bad:
        raise UsageError(f"prompt token {bad[0]} is outside the vocabulary (0..{vocab - 1})")
    from ..engine import SpecDecodeEngine
    from ..models import EngineError

    width, n = args.depth + 1, args.max_new_tokens
    limit = model.config.max_positions
    if limit is not None and max(map(len, prompts)) + n > limit:
        raise UsageError(
            f"the longest prompt ({max(map(len, prompts))} tokens) and --max-new-tokens {n} pass the model's "
            f"max_position_embeddings {limit}"
        )
    positions = max(map(len, prompts)) + n + 3 * width + 2
    library, block_table_width, block_size = _kernels(args, width, positions, device, model.config)
    try:
        engine = SpecDecodeEngine(
            model,
            draft,
            mode=args.mode,
            width=width,
            batch=len(prompts),
            block_size=block_size,
            block_table_width=block_table_width,
            library=library,
            sampling=sampling,
            draft_sampling=args.draft_sampling,
        )
        t = time.perf_counter()
        res = engine.run(prompts, max_new_tokens=n)
        wall = time.perf_counter() - t
        engine.close()
    except EngineError as e:
        raise UsageError(str(e)) from None
    outputs = [o[:n] for o in res.outputs]
    tokens = sum(map(len, outputs))
    doc = {
        "model": args.model,
        "mode": args.mode,
        "draft": args.draft,
        "depth": args.depth,
        "draft_vocab": None if draft.draft_vocab is None else draft.draft_vocab.size,  # ids the draft keeps
        "sampling": None
        if sampling is None
        else {
            "temperature": args.temperature,
            "top_k": args.top_k,
            "top_p": args.top_p,
            "seed": args.seed,
            "draft_sampling": args.draft_sampling,
        },
        "prompts": prompts,
        "outputs": outputs,
        "texts": [tokenizer.decode(o) for o in outputs] if tokenizer is not None else None,
        "acceptance": res.acceptance,
        "tokens": tokens,
        "seconds": wall,
        "tokens_per_s": tokens / wall if wall > 0 else None,
        "layout": {"block_table_width": block_table_width, "block_size": block_size},
        "runtime_stats": res.runtime_stats,  # modes on built kernels: fast-path steps and fallbacks by reason
    }
    if args.json:
        print(json.dumps(doc))
        return 0
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        print(f"prompt {i}: {','.join(map(str, p))} -> {','.join(map(str, o))}")
        if doc["texts"] is not None:
            print(f"  text: {doc['texts'][i]!r}")
    rate = f"{doc['tokens_per_s']:.1f}" if doc["tokens_per_s"] else "-"
    print(
        f"acceptance {res.acceptance:.2f}, {tokens} tokens in {wall:.2f} s ({rate} tokens/s), "
        f"mode {args.mode}, {args.draft} draft, depth {args.depth}"
        + (f", draft vocabulary {doc['draft_vocab']} ids" if doc["draft_vocab"] is not None else "")
        + (f", sampled at temperature {args.temperature}" if sampling is not None else "")
    )
    return 0
