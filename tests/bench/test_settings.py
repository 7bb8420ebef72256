"""``BenchSettings``: one spelling of the bench settings, from which the CLI's options and the validation come."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from specgen.bench.config import (
    BLOCKS_MESSAGE,
    COUNTS_MESSAGE,
    MODEL_PRESETS,
    BenchSettings,
    configure,
    options,
)
from specgen.bench.support import BenchError
from specgen.cli import build_parser
from specgen.cli.common import UsageError

TP = "--tp must be at least 1, --draft-tp 1 or --tp"
# (field, the settings that make it bad, what the BenchError says): every validated field has a case
BAD = [
    (
        "model",
        {"model": "huge"},
        "unknown --model 'huge' (known: tiny, qwen3-0.6b, qwen3-8b, qwen3.5-tiny, qwen3.5-0.8b, qwen3.5-2b; "
        "or a Hugging Face Qwen3 or Qwen3.5 folder)",
    ),
    ("depths", {"depths": ()}, "--depth and --batch need at least one value each"),
    ("depths", {"depths": (0,)}, "--depth and --batch values must be at least 1"),
    ("depths", {"depths": (16,)}, "--depth 16: verify width 17 is beyond the kernel families' widths"),
    (
        "depths",
        {"depths": (9,), "block_table_width": 1, "block_size": 8},
        "--depth 9: a block of 10 rows is wider than the KV layout allows (--block-table-width 1 x --block-size 8)",
    ),
    ("draft", {"draft": "eagle"}, "unknown --draft 'eagle' (known: mtp, dflash, dspark)"),
    ("draft_weights", {"draft_weights": "w"}, "--draft-weights loads a DFlash or DSpark draft"),
    ("batches", {"batches": (0,)}, "--depth and --batch values must be at least 1"),
    ("steps", {"steps": 0}, "--steps must be at least 1"),
    ("warmup", {"warmup": 0}, "--warmup must be at least 1 (the first step of every run captures its graphs)"),
    ("modes", {"modes": ("baseline", "turbo")}, "unknown mode 'turbo' (known: baseline"),
    ("acceptance", {"acceptance": 1.5}, "--acceptance must lie in [0, 1], got 1.5"),
    ("temperature", {"temperature": -0.5}, "--temperature must be a finite number >= 0 (0: greedy verification)"),
    ("temperature", {"temperature": float("inf")}, "--temperature must be a finite number >= 0"),
    ("top_k", {"top_k": -1}, "--top-k must be at least 0 (0: every token), got -1"),
    ("top_p", {"top_p": 0.0}, "--top-p must lie in (0, 1] (1: every token), got 0.0"),
    ("top_p", {"top_p": 1.5}, "--top-p must lie in (0, 1] (1: every token), got 1.5"),
    (
        "check",
        {"check": True, "temperature": 0.7},
        "--check compares with plain greedy decoding; it needs --temperature 0",
    ),
    ("block_size", {"block_size": 0}, BLOCKS_MESSAGE),
    ("block_table_width", {"block_table_width": -1}, BLOCKS_MESSAGE),
    ("block_table_width", {"block_table_width": 2}, "--block-table-width 2 x --block-size 16 = 32 positions"),
    ("prompt_len", {"prompt_len": 0}, COUNTS_MESSAGE),
    ("dtype", {"dtype": "half"}, "unknown --dtype 'half' (known: auto, float32, bfloat16)"),
    ("draft_sampling", {"draft_sampling": "top"}, "unknown --draft-sampling 'top' (known: sample, argmax)"),
    ("draft_sampling", {"draft_sampling": "argmax"}, "--draft-sampling argmax needs --temperature > 0"),
    (
        "draft_sampling",
        {"draft_sampling": "argmax", "temperature": 0.7, "draft": "dflash"},
        "--draft-sampling argmax changes the MTP draft; a dflash draft's tokens are one-hot already",
    ),
    (
        "draft_sampling",
        {"draft_sampling": "argmax", "temperature": 0.7, "acceptance": 0.7},
        "--draft-sampling argmax: --acceptance replaces the drafts (one-hot)",
    ),
    ("draft_vocab", {"draft_vocab": "no/such.json"}, "--draft-vocab takes a count of ids or a JSON file"),
    ("device", {"device": "tpu"}, "--device tpu: use cpu or cuda (or cuda:N)"),
    ("bare_repeats", {"bare_repeats": 0}, COUNTS_MESSAGE),
    ("repeats", {"repeats": 0}, "--repeats must be at least 1"),
    ("tp", {"tp": 0}, TP),
    ("tp", {"tp": 3}, "--tp 3: tiny's query heads (4) does not divide evenly over 3 ranks"),
    ("draft_tp", {"draft_tp": 2}, TP),
    ("check_ranks", {"check_ranks": -1}, TP),
    ("profile_steps", {"profile_steps": -1}, "--profile-steps must be at least 0 (0: no kernel-level profile)"),
    ("own_draft_graph", {"own_draft_graph": True}, "--own-draft-graph is for a block draft (dflash, dspark)"),
]


def _bench_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["bench"]


def test_every_setting_is_a_cli_option_with_help_and_the_same_default():
    by_dest = {a.dest: a for a in _bench_parser()._actions}
    for f in dataclasses.fields(BenchSettings):
        action = by_dest.get(f.name)
        assert action is not None, f"BenchSettings.{f.name} has no specgen bench option"
        assert action.help and action.help.strip(), f"{action.option_strings[0]} has no help text"
        assert action.default == f.default, f.name
        assert f.metadata["option"].help == action.help
    args = build_parser().parse_args(["bench"])
    from specgen.cli.bench import _settings

    assert _settings(args) == BenchSettings()  # the parser's defaults are the dataclass's


def test_the_option_names_and_metavars_of_the_command_line():
    flags = {a.option_strings[0]: a for a in _bench_parser()._actions if a.option_strings}
    assert list(flags)[1:] == [
        "--model",
        "--depth",
        "--draft",
        "--draft-weights",
        "--batch",
        "--steps",
        "--warmup",
        "--modes",
        "--acceptance",
        "--temperature",
        "--top-k",
        "--top-p",
        "--draft-sampling",
        "--draft-vocab",
        "--check",
        "--out",
        "--kernels",
        "--block-size",
        "--block-table-width",
        "--prompt-len",
        "--dtype",
        "--device",
        "--seed",
        "--bare-repeats",
        "--repeats",
        "--tp",
        "--draft-tp",
        "--check-ranks",
        "--profile-steps",
        "--no-device-guard",
        "--no-side-streams",
        "--mapped-mirror",
        "--own-draft-graph",
        "--replot",
    ]
    usage = _bench_parser().format_usage()
    for text in (
        "--depth DEPTH",
        "--batch BATCH",
        "--draft-weights DIR",
        "--check-ranks N",
        "--model PRESET|DIR",
        "--draft-vocab N|FILE",
    ):
        assert text in usage


def test_the_command_line_text_is_read_into_typed_settings():
    from specgen.cli.bench import _settings

    args = build_parser().parse_args(
        ["bench", "--depth", "2-4", "--batch", "1,8", "--modes", "baseline, specgen", "--acceptance", "0.5", "--check"]
    )
    s = _settings(args)
    assert s.depths == (2, 3, 4) and s.batches == (1, 8) and s.modes == ("baseline", "specgen")
    assert s.acceptance == 0.5 and s.check is True


def test_sampling_options_reach_the_config():
    """``--temperature`` (with ``--top-k``, ``--top-p``) samples, each row seeded ``--seed`` + its index; at
    temperature 0 the run is greedy (no sampling) and its plans are the greedy tails."""
    from specgen.cli.bench import _settings
    from specgen.runtime.sampling import SamplingParams

    greedy = _settings(build_parser().parse_args(["bench", "--device", "cpu"])).resolve()
    assert greedy.sampling is None and greedy.sampling_params(2) is None
    assert greedy.boundaries == ("draft-to-verify", "verify-to-draft")
    argv = ["bench", "--device", "cpu", "--temperature", "0.7", "--top-k", "8", "--top-p", "0.9", "--seed", "4"]
    c = _settings(build_parser().parse_args(argv)).resolve()
    assert c.sampling == (0.7, 8, 0.9) and c.boundaries == ("draft-to-verify", "verify-to-draft-sampled")
    assert c.sampling_params(2) == [SamplingParams(0.7, 8, 0.9, 4), SamplingParams(0.7, 8, 0.9, 5)]
    assert c.draft_sampling == "sample"
    argmax = _settings(build_parser().parse_args([*argv, "--draft-sampling", "argmax"])).resolve()
    assert argmax.draft_sampling == "argmax" and argmax.sampling == c.sampling
    with pytest.raises(UsageError, match="invalid choice: 'top'"):  # one line naming the choices, exit 2
        build_parser().parse_args([*argv, "--draft-sampling", "top"])


def test_no_device_guard_reaches_the_config():
    """``--no-device-guard``: the A/B of the device guard's cost (bench.json and costs.json record it)."""
    from specgen.cli.bench import _settings

    assert _settings(build_parser().parse_args(["bench"])).resolve().device_guard is True
    s = _settings(build_parser().parse_args(["bench", "--no-device-guard", "--device", "cpu"]))
    assert s.no_device_guard is True and s.resolve().device_guard is False


def test_no_side_streams_reaches_the_config():
    """``--no-side-streams``: specgen's step graphs on one stream, as an A/B (bench.json and costs.json record it)."""
    from specgen.cli.bench import _settings

    assert _settings(build_parser().parse_args(["bench"])).resolve().side_streams is True
    s = _settings(build_parser().parse_args(["bench", "--no-side-streams", "--device", "cpu"]))
    assert s.no_side_streams is True and s.resolve().side_streams is False
    assert s.resolve().mapped_mirror is True  # one stream writes the host fields through mapped memory


def test_mapped_mirror_reaches_the_config():
    """``--mapped-mirror``: the host fields through mapped memory with side streams (recorded as ``mapped_mirror``)."""
    from specgen.cli.bench import _settings

    assert _settings(build_parser().parse_args(["bench"])).resolve().mapped_mirror is False
    c = _settings(build_parser().parse_args(["bench", "--mapped-mirror", "--device", "cpu"])).resolve()
    assert c.mapped_mirror is True and c.side_streams is True


def test_a_block_draft_runs_at_the_step_graphs_end_unless_told():
    """A block draft with side streams runs at the end of specgen's step graph (recorded as ``draft_at_end``);
    ``--own-draft-graph`` keeps its own graph; the MTP chain and one stream never trail."""
    from specgen.cli.bench import _settings

    def resolved(*args):
        return _settings(build_parser().parse_args(["bench", *args, "--device", "cpu"])).resolve().draft_at_end

    assert resolved() is False  # mtp
    assert resolved("--draft", "dspark") is True
    assert resolved("--draft", "dflash", "--own-draft-graph") is False
    assert resolved("--draft", "dflash", "--no-side-streams") is False


def test_every_validated_setting_has_a_bad_case():
    validated = {name for name, _, opt in options() if opt.check or opt.relation}
    assert validated == {f for f, _, _ in BAD}


@pytest.mark.parametrize("name, bad, message", BAD, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(BAD)])
def test_a_bad_value_gives_its_bench_error(name, bad, message):
    settings = {"device": "cpu", **bad}
    with pytest.raises(BenchError, match=re.escape(message)):
        configure(**settings)
    assert BenchSettings(**settings).problem().startswith(message.split(" (")[0])


def test_the_model_choices_are_the_presets():
    from specgen.models.qwen3 import PRESETS
    from specgen.models.qwen3_5_config import PRESETS as HYBRID_PRESETS

    assert MODEL_PRESETS == tuple(PRESETS) + tuple(HYBRID_PRESETS)


def test_modes_are_read_when_the_settings_are_validated(monkeypatch):
    """A mode registered after the settings module was imported is known to the validation and the CLI."""
    from specgen.cli.bench import _settings
    from specgen.engine.modes import MODES, BaselineMode

    class LateMode(BaselineMode):
        name = "late"

    monkeypatch.setitem(MODES, "late", LateMode)
    assert "late" in configure(device="cpu", modes=("late",)).modes
    assert "late" in configure(device="cpu").modes  # every registered mode by default
    args = build_parser().parse_args(["bench", "--modes", "late", "--device", "cpu"])
    assert _settings(args).resolve().modes == ("late",)
