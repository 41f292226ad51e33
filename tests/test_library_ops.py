"""The vendor's GEMMs and attention as a task may allow them (``extra_allowed_ops``, what `kernelfix tune` passes its
sessions): both layers of legality accept exactly those calls, forward and backward, and nothing else comes with them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.legality.allowlist import LIBRARY_GEMM_ATTENTION, is_allowed, make_allowed
from kernelfix.tools.legality.static_checks import check
from kernelfix.tools.workers.candidate.recorder import OpRecorder, mark_function_backward

LIBRARY = make_allowed(LIBRARY_GEMM_ATTENTION)
PRELUDE = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
FORWARD = "class ModelNew(nn.Module):\n    def forward(self, x, w):\n        return {expr}\n"


def _warnings(code: str, **cfg) -> list[str]:
    return [f.message for f in check(PRELUDE + code, JudgeConfig(**cfg)) if f.severity == "warning"]


@pytest.mark.parametrize(
    "expr",
    [
        "F.linear(x, w)",
        "torch.nn.functional.linear(x, w)",
        "torch.matmul(x, w)",
        "x @ w",
        "x.matmul(w)",
        "torch.mm(x, w)",
        "x.mm(w)",
        "torch.addmm(x, x, w)",
        "torch.bmm(x, w)",
        "x.bmm(w)",
        "torch._grouped_mm(x, w, offs=w)",
        "F.scaled_dot_product_attention(x, w, w, is_causal=True, enable_gqa=True)",
    ],
)
def test_static_check_accepts_a_library_call_only_where_allowed(expr):
    code = FORWARD.format(expr=expr)
    assert _warnings(code), "without the library ops a torch compute call in the forward is a warning"
    assert _warnings(code, extra_allowed_ops=list(LIBRARY_GEMM_ATTENTION)) == []


def test_static_check_nn_linear_is_linear():
    code = (
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        return self.lin(x)\n"
    )
    assert _warnings(code) and not _warnings(code, extra_allowed_ops=["linear"])


@pytest.mark.parametrize(
    "expr", ["F.softmax(x, -1)", "torch.relu(x)", "x.sum()", "torch.mul(x, w)", "torch.cat([x, w])", "torch.topk(x, 2)"]
)
def test_static_check_other_compute_still_warned(expr):
    assert _warnings(FORWARD.format(expr=expr), extra_allowed_ops=list(LIBRARY_GEMM_ATTENTION))


def test_removed_ops_win_over_library_parts():
    assert "mm" not in make_allowed(["linear"], remove=["mm"]) and "addmm" in make_allowed(["linear"], remove=["mm"])


def _record(fn, *inputs):
    """(forward ops, backward ops) the judge's recorder sees for fn(*inputs) and its backward under a random cotangent."""
    rec = OpRecorder()
    mark_function_backward(rec)
    leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
    out = rec.run(fn, *leaves)
    rec.run_backward(lambda: torch.autograd.backward(out, torch.randn_like(out)))
    strip = lambda ops: {k.removeprefix("aten::"): v for k, v in ops.items()}  # noqa: E731
    return strip(rec.ops()), strip(rec.backward_ops())


def _refused(ops: dict[str, int], allowed: frozenset[str]) -> set[str]:
    return {op for op in ops if not is_allowed(f"aten::{op}", allowed)}


q, kv = torch.randn(2, 4, 16, 8), torch.randn(2, 2, 16, 8)
CASES = {
    "linear": (lambda x, w: F.linear(x, w), torch.randn(2, 8, 16), torch.randn(32, 16)),
    "matmul": (lambda x, w: torch.matmul(x, w.t()), torch.randn(2, 8, 16), torch.randn(32, 16)),
    "bmm": (lambda x, w: torch.bmm(x, w), torch.randn(2, 8, 16), torch.randn(2, 16, 8)),
    "sdpa_gqa": (
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True),
        q,
        kv,
        kv.clone(),
    ),
    "grouped_mm": (
        lambda x, w: torch._grouped_mm(x, w.transpose(-2, -1), offs=torch.tensor([16, 32, 48, 64], dtype=torch.int32)),
        torch.randn(64, 16),
        torch.randn(4, 32, 16),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_runtime_library_calls_allowed_forward_and_backward(name):
    fn, *inputs = CASES[name]
    fwd, bwd = _record(fn, *inputs)
    assert _refused(fwd, make_allowed()) and not _refused(fwd, LIBRARY), (
        fwd
    )  # refused by default, allowed with the library
    assert not _refused(bwd, LIBRARY), (
        bwd
    )  # its own backward (torch's formula or the backend's X_backward) comes with it
    if name == "sdpa_gqa":
        assert "_scaled_dot_product_flash_attention_for_cpu_backward" in bwd


def test_runtime_what_autograd_adds_around_a_library_call_stays_the_candidates():
    # a bias's gradient is a sum; a tensor read by two GEMMs gets its gradients added: torch compute, not the library's
    _, bwd = _record(lambda x, w, b: F.linear(x, w, b), torch.randn(8, 16), torch.randn(32, 16), torch.randn(32))
    assert _refused(bwd, LIBRARY) == {"sum"}
    fwd, bwd = _record(
        lambda x, w1, w2: torch.addmm(torch.mm(x, w1), x, w2),
        torch.randn(8, 16),
        torch.randn(16, 4),
        torch.randn(16, 4),
    )
    assert not _refused(fwd, LIBRARY) and _refused(bwd, LIBRARY) == {"add"}


def test_runtime_attention_math_fallback_is_not_the_library():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def math_attention(a, b, c):
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(a, b, c, is_causal=True)

    fwd, _ = _record(math_attention, q, q.clone(), q.clone())
    assert {"_safe_softmax", "mul"} <= _refused(fwd, LIBRARY), fwd  # torch's attention in torch ops: not a library call


def test_other_compute_stays_refused():
    fwd, bwd = _record(lambda x: torch.softmax(x, -1).sum(), torch.randn(4, 8))
    assert {"_softmax", "sum"} <= _refused(fwd, LIBRARY) and _refused(bwd, LIBRARY)
