"""Guard expressions and the tensor checks that refuse a launch."""

from __future__ import annotations

import pytest
import torch

from specgen.runtime import guards as G

W = 4
FAMILY = "spec_verify_token_update"


def reference(last, draft):
    return torch.cat([last[:, None], draft.to(torch.int32)], dim=1).reshape(-1)


def inputs(B, dtype=torch.int32, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    last = torch.randint(0, 1000, (B,), generator=g, dtype=torch.int32)
    draft = torch.randint(0, 1000, (B, W - 1), generator=g).to(dtype)
    return last.to(device), draft.to(device), torch.full((B * W,), -7, dtype=torch.int32, device=device)


def _poisoned(B=4):
    last, draft, tokens = inputs(B)
    return last, draft, tokens


@pytest.mark.parametrize(
    "case, match",
    [
        ("dtype", "last_tokens dtype expected int32, got int64"),
        ("shape", r"tokens shape expected \(16,\)"),
        ("draft_shape", r"draft_tokens shape expected \(4, 3\)"),
        ("noncontig", "draft_tokens must be contiguous"),
        ("count", "expected 3 tensors"),
        ("device", "device expected cpu"),
    ],
)
def test_bad_arguments_refused_before_launch(token_lib, case, match):
    last, draft, tokens = _poisoned()
    if case == "dtype":
        last = last.long()
    elif case == "shape":
        tokens = torch.full((15,), -7, dtype=torch.int32)
    elif case == "draft_shape":
        draft = torch.zeros(4, 4, dtype=torch.int32)
    elif case == "noncontig":
        draft = torch.zeros(W - 1, 4, dtype=torch.int32).t()
    elif case == "device":
        tokens = torch.full((16,), -7, dtype=torch.int32, device="meta")
    args = (last, draft) if case == "count" else (last, draft, tokens)
    with pytest.raises(G.KernelArgumentError, match=match):
        token_lib.get(FAMILY, W)(*args)
    if tokens.device.type == "cpu":
        assert bool((tokens == -7).all()), "a refused call must not write"


def test_guards_evaluator():
    guards = [("max_seq_len + 4 <= 64 * 128", "S + W <= BT * BS"), ("min_seq_len >= 0 and not batch < 0", "sizes")]
    assert G.check_guards(guards, min_seq_len=0, max_seq_len=100, batch=3).ok
    bad = G.check_guards(guards, min_seq_len=-1, max_seq_len=9000, batch=3)
    assert not bad and bad.failed == guards
    assert G.safe_eval("(B * W + 1, (B + 127) // 128)", {"B": 300, "W": 4}, G.SHAPE_NAMES) == (1201, 3)
    for unsafe in [
        "__import__('os')",
        "max_seq_len.__class__",
        "open('x')",
        "[1][0]",
        "2 ** 99999",
        "lambda: 1",
        "batch if batch else 1",
        "True",
        "'s'",
        "x + 1",
    ]:
        with pytest.raises(G.UnsafeExpressionError):
            G.safe_eval(unsafe, {"batch": 1, "min_seq_len": 0, "max_seq_len": 1})
