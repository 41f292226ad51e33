"""The static layer of legality: what is refused before anything runs, and what is only a warning."""

import pytest

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.legality.static_checks import check, errors
from kernelfix.tools.verdict import Category

PRELUDE = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def cats(code: str, **cfg) -> set[Category]:
    return {f.category for f in errors(check(PRELUDE + code, JudgeConfig(**cfg)))}


def warnings(code: str) -> list[str]:
    return [f.message for f in check(PRELUDE + code) if f.severity == "warning"]


@pytest.mark.parametrize(
    "code",
    [
        "torch.allclose = lambda *a, **k: True",
        "F.relu = lambda x: x",
        "setattr(torch, 'matmul', None)",
        "import ctypes",
        "import gc",
        "from kernelfix.tools import judge",
        "import sys\nsys.modules['torch'] = None",
        "x = getattr(torch, 'mat' + 'mul')",
        "exec('import os')",
        "from torch import _C",
        "import torch.utils._python_dispatch",
        "import os\nos.kill(os.getppid(), 9)",
        "def f(x):\n    return f.__globals__",
        "class T(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, *a, **k):\n        pass",
    ],
)
def test_tampering_is_refused(code):
    assert Category.TAMPERING in cats(code)


def test_fallback_to_torch_in_forward_is_refused():
    code = (
        "def k(x):\n    raise RuntimeError\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        try:\n            return k(x)\n"
        "        except Exception:\n            return F.gelu(x)\n"
    )
    assert Category.FALLBACK in cats(code)


def test_try_except_that_reraises_is_fine():
    code = (
        "def k(x):\n    return x\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        try:\n            return k(x)\n"
        "        except Exception as e:\n            raise RuntimeError('kernel failed') from e\n"
    )
    assert cats(code) == set()


def test_fallback_reached_through_a_helper_is_refused():
    code = (
        "def run(x):\n    try:\n        return x\n    except Exception:\n        return torch.relu(x)\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        return run(x)\n"
    )
    assert Category.FALLBACK in cats(code)


def test_streams_and_threads_refused_unless_allowed():
    stream = (
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        s = torch.cuda.Stream()\n        return x\n"
    )
    assert Category.SIDE_STREAM in cats(stream)
    assert cats(stream, allow_streams=True) == set()
    assert Category.THREADS in cats("import threading")
    assert Category.SIDE_STREAM in cats("src = '''cudaStream_t s; cudaStreamCreate(&s); // launch here and return'''")


def test_vendor_libraries_in_cxx_refused_unless_allowed():
    src = "src = '''#include <cublas_v2.h>\\nvoid f() { cublasSgemm(h, ...); } // a long enough source'''"
    assert Category.DISALLOWED_LIBRARY in cats(src)
    assert cats(src, allow_libraries=True) == set()


def test_torch_compile_in_candidate_is_refused():
    assert Category.DISALLOWED_ATEN in cats("f = torch.compile(lambda x: x)")


def test_torch_compute_in_forward_is_a_warning_not_an_error():
    code = (
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        y = torch.empty_like(x)\n        return self.lin(torch.matmul(x, x)) @ y + x.sum()\n"
    )
    assert cats(code) == set()
    w = " ".join(warnings(code))
    assert "torch.matmul" in w and "@ operator" in w and "self.lin" in w and ".sum()" in w
    assert "empty_like" not in w


def test_torch_in_init_is_not_flagged():
    code = "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = nn.Parameter(torch.randn(4, 4).relu())\n    def forward(self, x):\n        return x\n"
    assert warnings(code) == []


def test_cxx_aten_compute_is_a_warning():
    code = "src = '''torch::Tensor f(torch::Tensor a) { auto out = torch::empty_like(a); return at::matmul(a, a); }'''"
    w = warnings(code)
    assert any("at::matmul" in m for m in w) and not any("empty_like" in m for m in w)


def test_ordinary_candidate_has_no_findings():
    code = (
        "import triton\nimport triton.language as tl\nfrom torch.utils.cpp_extension import load_inline\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        y = torch.empty_like(x)\n        out = y.view(-1).contiguous()\n        return out.reshape(x.shape)\n"
    )
    assert check(PRELUDE + code) == []


def test_host_syncs_in_the_forward_path_are_warnings_with_their_line():
    code = (
        "def helper(t):\n    return t.cpu()\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.n = torch.zeros(1).item()\n"
        "    def forward(self, x):\n        m = x.abs().amax().item()\n        torch.cuda.synchronize()\n"
        "        rows = x.to('cpu').tolist()\n        torch.cuda.current_stream().synchronize()\n        return helper(x) * m\n"
    )
    found = [f for f in check(PRELUDE + code) if f.rule == "host_sync"]
    assert all(f.severity == "warning" for f in found) and cats(code) == set()
    lines = {f.line: f.message for f in found}
    first = PRELUDE.count("\n")
    assert (
        ".item()" in lines[first + 8]
        and "host sync" in lines[first + 8]
        and "keep the value on the GPU" in lines[first + 8]
    )
    assert "torch.cuda.synchronize()" in lines[first + 9]
    assert '.to("cpu")' in lines[first + 10] or ".tolist()" in lines[first + 10]
    assert ".synchronize()" in lines[first + 11] and ".cpu()" in lines[first + 2]
    assert first + 6 not in lines  # __init__ may read values once


def test_host_syncs_in_cxx_are_warnings():
    code = "src = '''void f(float* d, float* h) { k<<<1, 1>>>(d); cudaDeviceSynchronize(); cudaMemcpy(h, d, 4, cudaMemcpyDeviceToHost); }'''"
    w = [f for f in check(PRELUDE + code) if f.rule == "host_sync"]
    assert len(w) == 1 and "cudaDeviceSynchronize()" in w[0].message and w[0].severity == "warning"
    assert not [
        f
        for f in check(PRELUDE + "src = '''cudaMemcpyAsync(h, d, 4, cudaMemcpyDeviceToHost, stream);'''")
        if f.rule == "host_sync"
    ]
