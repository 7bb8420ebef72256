"""Tensor parallelism for the hybrid target (Gated DeltaNet + gated attention) on the CPU: two gloo ranks.

The two ranks of ``tp_hybrid_worker.py`` are started once (``launch``) and run
every case; here the single-device engine runs the same cases.  TP2's tokens
must equal TP1's (and plain greedy decoding's) on both ranks, and after every
step each rank's committed linear state must equal its heads' slice of TP1's
committed state: rank r keeps linear key heads ``[r * HK/2, (r + 1) * HK/2)``,
their value heads and their conv channels, and never communicates them.
"""

from __future__ import annotations

import copy
import json
import random
import sys
from pathlib import Path

import pytest
import torch
from oracles.hybrid_reference import CommittedStates, hybrid_greedy

from specgen.engine.acceptance import AcceptanceMix
from specgen.engine.draft_kinds import DRAFT_KINDS
from specgen.models.qwen3_5 import Qwen35Config, Qwen35Model
from specgen.models.tp import TensorParallelQwen35, shard_layer, shard_model, shard_problem
from specgen.parallel.group import TensorParallel, TPError
from specgen.parallel.launch import launch

PRESET = "qwen3.5-tiny"
NEW = 10
WORKER = Path(__file__).with_name("tp_hybrid_worker.py")
TIMEOUT_S = 400
ATOL = 1e-5
# (kind, mode, depth, batch, p, draft_tp): p None drafts with the MTP head's own tokens
CASES = [
    (kind, mode, depth, batch, p, 1)
    for mode in ("baseline", "specgen")
    for kind, depth, batch, p in (("mtp", 2, 1, None), ("mtp", 3, 3, 0.8), ("dflash", 3, 2, 0.8), ("dflash", 7, 1, 0.9))
] + [("mtp", "specgen", 3, 3, 0.8, 2)]  # the MTP body split over the ranks too
IDS = [f"{m}-{k}{d}-b{b}" + ("-dtp2" if t > 1 else "") for k, m, d, b, _, t in CASES]


class HeadSlices(TensorParallel):
    """A rank of a group whose all-reduce is left to the caller (the partial sums stay apart)."""

    def all_reduce_(self, t: torch.Tensor) -> torch.Tensor:
        return t


def prompts_for(batch: int, width: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(width if b == 0 else rng.randint(1, 9))] for b in range(batch)]


def rank_heads(cfg: Qwen35Config, rank: int, size: int = 2) -> tuple[slice, torch.Tensor]:
    """Rank ``rank``'s value heads and conv channels (``[q | k | v]``) of a linear layer, by the config alone."""
    hk, hv = cfg.linear_num_key_heads // size, cfg.linear_num_value_heads // size
    dk, dv, qk = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_num_key_heads * cfg.linear_key_head_dim
    keys = torch.arange(rank * hk * dk, (rank + 1) * hk * dk)
    values = torch.arange(rank * hv * dv, (rank + 1) * hv * dv)
    return slice(rank * hv, (rank + 1) * hv), torch.cat([keys, qk + keys, 2 * qk + values])


@pytest.fixture(scope="module")
def hybrid():
    return Qwen35Model.create(PRESET, seed=0)


@pytest.fixture(scope="module")
def job(hybrid):
    cases = []
    for kind, mode, depth, batch, p, draft_tp in CASES:
        prompts = prompts_for(batch, depth + 1, seed=depth * 10 + batch)
        oracle = hybrid_greedy(hybrid, prompts, NEW + depth + 1)
        cases.append(
            dict(kind=kind, mode=mode, depth=depth, batch=batch, p=p, draft_tp=draft_tp, prompts=prompts, oracle=oracle)
        )
    return cases


@pytest.fixture(scope="module")
def ranks(job, hybrid_kernels, tmp_path_factory):
    """Both ranks' results, from one launch of two gloo ranks."""
    folder = tmp_path_factory.mktemp("tp_hybrid")
    (folder / "job.json").write_text(
        json.dumps({"kernels": str(hybrid_kernels.root), "cases": [dict(c, new=NEW) for c in job]})
    )
    rc = launch([sys.executable, str(WORKER), str(folder / "job.json")], 2, timeout=TIMEOUT_S)
    assert rc == 0, f"a rank failed or hung (exit {rc})"
    return [torch.load(folder / f"out_{r}.pt") for r in range(2)]


def tp1_run(model, kernels, case) -> tuple[list[list[int]], list]:
    kind = DRAFT_KINDS[case["kind"]]
    mix = None
    if case["p"] is not None:
        mix = AcceptanceMix(case["p"], torch.tensor(case["oracle"]), model.config.vocab_size, seed=case["batch"])
    eng = kind.engine(
        model,
        kind.create(model, seed=1),
        mode=case["mode"],
        width=case["depth"] + 1,
        batch=case["batch"],
        block_size=16,
        block_table_width=8,
        library=kernels,
        acceptance=mix,
        compile_backend="eager",
    )
    eng.observer = committed = CommittedStates()
    try:
        return eng.run(case["prompts"], max_new_tokens=NEW).outputs, committed.steps
    finally:
        eng.close()


# --- the split, in one process ------------------------------------------------------------------------------


def test_split_gated_deltanet_partial_outputs_sum_to_the_whole(hybrid):
    """Each rank's layer (its key heads, their value heads and conv channels) gives a partial ``out_proj``
    sum; the two add up to the whole layer's output, and each rank's pool holds its heads' slice."""
    from specgen.models.gated_deltanet import LinearStatePool

    cfg, whole = hybrid.config, hybrid.layers[0].linear_attn
    g = torch.Generator().manual_seed(2)
    x = torch.randn(8, cfg.hidden_size, generator=g)
    rows = torch.arange(8).view(2, 4)

    def run(layer):
        pool = LinearStatePool(1, 16, layer.value_heads, layer.key_dim, layer.value_dim, layer.conv_dim, layer.kernel)
        a = layer(x, rows, torch.tensor([-1, -1]), torch.arange(8), pool, 0)
        b = layer(x * 0.5, rows, torch.tensor([2, 7]), torch.arange(8) + 8, pool, 0)
        return a, b, pool

    want = run(whole)
    parts = []
    for r in range(2):
        layer = copy.deepcopy(hybrid.layers[0])
        shard_layer(layer, HeadSlices(2, r))
        lin = layer.linear_attn
        assert (lin.key_heads, lin.value_heads, lin.conv_dim) == (1, 2, 48)
        parts.append(run(lin))
    for i in range(2):
        torch.testing.assert_close(parts[0][i] + parts[1][i], want[i], atol=ATOL, rtol=0)
    for r, (_, _, pool) in enumerate(parts):
        heads, channels = rank_heads(cfg, r)
        torch.testing.assert_close(pool.recurrent[0], want[2].recurrent[0][:, heads], atol=ATOL, rtol=0)
        torch.testing.assert_close(pool.conv[0], want[2].conv[0][:, channels], atol=ATOL, rtol=0)


def test_unsplittable_hybrid_shapes_are_one_line():
    cfg = Qwen35Config.preset(PRESET)
    assert shard_problem(cfg, 2) is None
    assert shard_problem(cfg, 4) == "KV heads (2) does not divide evenly over 4 ranks"
    odd = Qwen35Config("odd", 4, 64, 4, 4, 16, 128, 512, linear_num_key_heads=2, linear_num_value_heads=4)
    assert shard_problem(odd, 4) == "linear key heads (2) does not divide evenly over 4 ranks"
    model = Qwen35Model.create(odd, seed=0)
    before = model.layers[0].linear_attn.in_proj_qkv
    with pytest.raises(TPError, match=r"^linear key heads \(2\) does not divide evenly over 4 ranks$"):
        shard_model(model, HeadSlices(4, 0))
    assert model.layers[0].linear_attn.in_proj_qkv is before  # refused before any layer was touched


def test_a_rank_allocates_its_own_heads(hybrid):
    model = shard_model(copy.deepcopy(hybrid), HeadSlices(2, 1))
    assert isinstance(model, TensorParallelQwen35) and model.draft_config == hybrid.draft_config
    pool = model.allocate_linear_state(3)
    assert pool.recurrent[0].shape == (3, 2, 16, 8) and pool.conv[0].shape == (3, 48, 3)
    assert model.allocate_kv_cache(4, 16).k[0].shape[-2] == 1  # one of the two KV heads
    assert (model.vocab_lo, model.vocab_hi) == (256, 512)


# --- two gloo ranks -----------------------------------------------------------------------------------------


def test_split_gated_deltanet_all_reduces_to_the_whole(ranks, hybrid):
    cfg = hybrid.config
    for r, out in enumerate(ranks):
        whole, split = out["layer"]["whole"], out["layer"]["split"]
        for got, want in zip(split["outputs"], whole["outputs"]):
            torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
        heads, channels = rank_heads(cfg, r)
        torch.testing.assert_close(split["state"], whole["state"][:, heads], atol=ATOL, rtol=0)
        torch.testing.assert_close(split["window"], whole["window"][:, channels], atol=ATOL, rtol=0)


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_hybrid_tp2_equals_tp1_and_keeps_each_ranks_heads(ranks, job, hybrid, hybrid_kernels, index):
    case = job[index]
    outputs, committed = tp1_run(hybrid, hybrid_kernels, case)
    exp = [o[:NEW] for o in case["oracle"]]
    assert ranks[0]["runs"][index]["outputs"] == ranks[1]["runs"][index]["outputs"] == outputs == exp
    if case["mode"] == "specgen":
        for out in ranks:
            stats = out["runs"][index]["stats"]
            assert stats["fallback"] == {} and stats["fast_path"] >= 1
    for r, out in enumerate(ranks):
        heads, channels = rank_heads(hybrid.config, r)
        steps = out["runs"][index]["committed"]
        assert len(steps) == len(committed) > 1
        for step, (mine, whole) in enumerate(zip(steps, committed)):
            for layer, ((state, window), (w_state, w_window)) in enumerate(zip(mine, whole)):
                where = f"rank {r}, step {step}, linear layer {layer}"
                torch.testing.assert_close(state, w_state[:, heads], atol=ATOL, rtol=0, msg=where)
                torch.testing.assert_close(window, w_window[:, channels], atol=ATOL, rtol=0, msg=where)
