"""``specgen bench --draft dflash|dspark`` on the CPU, its one-line errors, and ``--draft-weights``."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from specgen.engine import greedy_generate
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.models.block_draft import BlockDraft
from specgen.models.checkpoint import _read, load_folder, save_file
from specgen.models.errors import EngineError


@pytest.mark.parametrize("draft", ["dflash", "dspark"])
def test_bench_block_draft_on_cpu(block_kernels, tmp_path, capsys, draft):
    from specgen.cli import main

    out = tmp_path / draft
    rc = main(
        [
            "bench",
            "--model",
            "tiny",
            "--draft",
            draft,
            "--depth",
            "3",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--kernels",
            str(block_kernels.root),
            "--block-table-width",
            "8",
            "--prompt-len",
            "8",
            "--acceptance",
            "0.7",
            "--bare-repeats",
            "2",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    result = json.loads((out / "bench.json").read_text())
    assert result["draft"] == draft and [r["mode"] for r in result["runs"]] == ["baseline", "specgen"]
    for r in result["runs"]:
        assert r["draft"] == draft and r["depth"] == 3 and r["width"] == 4
        assert r["equals_target_reference"] and r["modes_agree"] and r["tpot_ms"] > 0
        assert "verify_to_draft_us" in r and "host_syncs_per_step" in r
    assert result["runs"][1]["runtime_stats"]["fallback"] == {}
    assert "spec_verify_context_tail_update__w4_bt8_bs16" in result["runs"][1]["runtime_stats"]["graph"]


def test_bench_block_draft_errors(capsys, monkeypatch, tmp_path):
    from specgen.cli import main

    assert main(["bench", "--draft", "medusa", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "unknown --draft 'medusa' (known: mtp, dflash, dspark)" in err and len(err.strip().splitlines()) == 1
    assert (
        main(
            [
                "bench",
                "--draft",
                "dflash",
                "--depth",
                "40",
                "--block-size",
                "4",
                "--block-table-width",
                "8",
                "--device",
                "cpu",
            ]
        )
        == 2
    )
    assert "a block of 41 rows is wider than the KV layout allows" in capsys.readouterr().err
    assert main(["bench", "--draft", "dflash", "--depth", "16", "--device", "cpu"]) == 2
    assert "no build has variants for it" in capsys.readouterr().err
    assert main(["bench", "--draft", "mtp", "--draft-weights", str(tmp_path), "--device", "cpu"]) == 2
    capsys.readouterr()
    # a depth the kernel folder lacks, on a machine that cannot build: the specgen build command that makes it
    monkeypatch.setitem(sys.modules, "specgen.driver", None)
    assert (
        main(
            [
                "bench",
                "--draft",
                "dspark",
                "--depth",
                "5",
                "--device",
                "cpu",
                "--kernels",
                str(tmp_path / "none"),
                "--block-table-width",
                "8",
                "--steps",
                "4",
                "--modes",
                "specgen",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "specgen build --target c --boundary draft-to-verify,context-kv --widths 6" in err
    assert len(err.strip().splitlines()) == 1


def _checkpoint(draft: BlockDraft, folder, prefix="model.") -> dict:
    """The draft's tensors under the public DFlash names, split over two files, plus a config.json."""
    folder.mkdir()
    tensors = {prefix + n: p.detach().clone() + 0.01 * torch.randn(p.shape) for n, p in draft.named_parameters()}
    names = sorted(tensors)
    save_file({n: tensors[n] for n in names[: len(names) // 2]}, folder / "model-00001-of-00002.safetensors")
    save_file({n: tensors[n] for n in names[len(names) // 2 :]}, folder / "model-00002-of-00002.safetensors")
    cfg = {
        "num_hidden_layers": draft.config.num_layers,
        "dflash_config": {"target_layer_ids": list(draft.tap_layers), "mask_token_id": 3},
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    return tensors


def test_safetensors_round_trip_without_the_package(tmp_path):
    tensors = {"a": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int32), "c": torch.randn(2).bfloat16()}
    save_file(tensors, tmp_path / "x.safetensors")
    back = _read(tmp_path / "x.safetensors")  # the torch-only reader, whether or not safetensors is installed
    assert all(torch.equal(back[k], v) and back[k].dtype == v.dtype for k, v in tensors.items())
    assert set(load_folder(tmp_path)) == {"a", "b", "c"}


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_draft_weights_load_from_a_folder(tiny_target, block_kernels, tmp_path, kind):
    ref = DRAFT_KINDS[kind].create(tiny_target, seed=5)
    tensors = _checkpoint(ref, tmp_path / "ckpt")
    if kind == "dspark":
        assert {"model.markov_head.w1.weight", "model.markov_head.w2.weight"} <= set(tensors)
    assert {
        "model.fc.weight",
        "model.hidden_norm.weight",
        "model.layers.1.self_attn.k_norm.weight",
        "model.layers.0.mlp.down_proj.weight",
    } <= set(tensors)
    draft = DRAFT_KINDS[kind].create(tiny_target, weights=tmp_path / "ckpt")
    assert draft.config.mask_token_id == 3 and draft.tap_layers == ref.tap_layers
    for n, p in draft.named_parameters():
        assert torch.equal(p, tensors["model." + n])
    prompts = [[4, 5, 6], [7, 8]]
    eng = DRAFT_KINDS[kind].engine(
        tiny_target, draft, mode="specgen", width=4, batch=2, block_size=16, block_table_width=8, library=block_kernels
    )
    assert eng.run(prompts, max_new_tokens=10).outputs == greedy_generate(tiny_target, prompts, 10)


def test_draft_weights_errors(tiny_target, tmp_path):
    with pytest.raises(EngineError, match="no \\*.safetensors files"):
        DRAFT_KINDS["dflash"].create(tiny_target, weights=tmp_path)
    tensors = _checkpoint(DRAFT_KINDS["dflash"].create(tiny_target, seed=5), tmp_path / "ckpt", prefix="")
    with pytest.raises(EngineError, match="needs markov_head"):
        DRAFT_KINDS["dspark"].create(tiny_target, weights=tmp_path / "ckpt")
    (tmp_path / "bad").mkdir()
    save_file({k: v for k, v in tensors.items() if k != "norm.weight"}, tmp_path / "bad" / "m.safetensors")
    with pytest.raises(EngineError, match="lacks 1 draft tensors"):
        DRAFT_KINDS["dflash"].create(tiny_target, weights=tmp_path / "bad")


def test_default_matrix_covers_the_block_draft_widths():
    """DSpark --depth 7 (W=8) and DFlash --depth 15 (W=16): int32 layouts of the block boundaries only."""
    from specgen.specializations import DEFAULT, Layout

    for boundary in ("draft-to-verify", "context-kv"):
        extra = [lay for lay in DEFAULT.layouts(boundary) if lay.width not in DEFAULT.widths]
        assert extra == [Layout(8, 64, 128, "int32"), Layout(16, 64, 128, "int32")]
    assert {lay.width for lay in DEFAULT.layouts("verify-to-draft")} == {4, 5, 6}


def test_the_block_draft_names_its_own_post_verify_work(tiny_target, block_kernels):
    """The context projection is the block draft's own work after the verification (the bench's
    ``kernel_post_verify_us`` takes it out of the verify->draft gap); an MTP draft names none."""
    from specgen.models import MTPHead

    draft = DRAFT_KINDS["dflash"].create(tiny_target, seed=5)
    eng = DRAFT_KINDS["dflash"].engine(
        tiny_target, draft, mode="specgen", width=4, batch=2, block_size=16, block_table_width=8, library=block_kernels
    )
    assert eng.proposer.draft_work_after_verify() == eng.proposer.context_write
    mtp = DRAFT_KINDS["mtp"].engine(
        tiny_target,
        MTPHead.create(tiny_target, seed=1),
        mode="baseline",
        width=4,
        batch=2,
        block_size=16,
        block_table_width=8,
    )
    assert mtp.proposer.draft_work_after_verify() is None


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_cuda_block_draft_post_verify_figures(block_kernels, kind):
    """On the GPU: a block draft's profiled specgen steps give the context projection's span and the
    verify->draft gap outside it, from the projection profiled alone."""
    from specgen.bench import kernel_timeline as kt
    from specgen.bench.bare import bare_trace, forward_trace, work_trace
    from specgen.bench.profiler import figures
    from specgen.models import Qwen3Model

    m = Qwen3Model.create("tiny", seed=0, device="cuda")
    draft = DRAFT_KINDS[kind].create(m, seed=5)
    prompts = [[4, 5, 6, 9], [7, 8]]
    for k in range(2):  # the first: the process's first profiled run shows no graph kernels (StepProfiler)
        eng = DRAFT_KINDS[kind].engine(
            m, draft, mode="specgen", width=4, batch=2, block_size=16, block_table_width=8, library=block_kernels
        )
        res = eng.run(prompts, steps=5, warmup_steps=2, profile=True)
        forward = kt.forward_names(kt.load_trace(forward_trace(eng)))
        projection = kt.forward_names(kt.load_trace(work_trace(eng, eng.proposer.draft_work_after_verify())))
        draft_names = kt.phase_signature(kt.attribute(kt.load_trace(bare_trace(eng))))
        assert eng.strategy.trails_draft  # the step graph drafts for the next step: its signature says so
        draft_names.append(kt.TRAILS)
        eng.close()
    fig = figures(res.trace, forward, draft_names, projection)
    print(kind, {k: v for k, v in fig.items() if not k.endswith("steps_us")})
    assert projection and fig["kernel_steps"] >= 4
    gap, span, out = fig["kernel_verify_to_draft_us"], fig["projection_us"], fig["kernel_post_verify_us"]
    assert gap is not None and span is not None and out is not None and span > 0
    assert 0 <= out < gap and out == pytest.approx(gap - span, abs=1.0)  # medians of per-step differences
    assert 0 <= fig["post_verify_idle_us"] <= gap
