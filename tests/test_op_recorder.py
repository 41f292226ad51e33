"""The op recorder (a dispatch mode around each judged forward): what it counts, what it leaves out,
and that it holds nothing (torch.profiler, its predecessor, kept every forward's outputs alive)."""

from __future__ import annotations

import gc
import weakref

import torch

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.legality import static_checks
from kernelfix.tools.workers.candidate.recorder import OpRecorder, Suspended


def test_counts_what_forward_dispatches_as_it_decomposes():
    rec = OpRecorder()
    x = torch.rand(4, 4)
    rec.run(lambda a: torch.nn.functional.linear(a, a).relu(), x)
    ops = rec.ops()
    assert ops["aten::mm"] == 1 and ops["aten::relu"] == 1 and ops["aten::t"] == 1
    assert rec.intact


def test_suspended_work_is_not_counted():
    rec = OpRecorder()

    def f(a):
        with Suspended(rec):  # as Triton's launch paths run (interpreter copies, autotuner)
            a.add(1)
        return a.mul(2)

    rec.run(f, torch.rand(3))
    assert rec.ops() == {"aten::mul": 1}


def test_it_keeps_no_output_alive():
    rec = OpRecorder()
    refs = []
    for _ in range(5):
        out = rec.run(lambda a: a * 2, torch.rand(256, 256))
        refs.append(weakref.ref(out))
        del out
    gc.collect()
    assert not [r for r in refs if r() is not None]


def test_taking_the_recorder_off_the_stack_is_seen():
    from torch.utils._python_dispatch import _pop_mode

    rec = OpRecorder()
    rec.run(lambda a: (_pop_mode(), a.relu())[1], torch.rand(3))  # popped and not put back
    assert not rec.intact and "aten::relu" not in rec.ops()
    src = "import torch\nfrom torch.utils._python_dispatch import _pop_mode\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        _pop_mode()\n        return x.relu()\n"
    errs = static_checks.errors(static_checks.check(src, JudgeConfig()))
    assert errs and errs[0].category.value == "cheating:tampering"  # and a candidate's source may not reach it


def test_cpp_that_steps_around_the_dispatcher_is_refused():
    src = (
        "import torch\nfrom torch.utils.cpp_extension import load_inline\n"
        'cpp = "c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKeySet(c10::DispatchKey::Python)); at::matmul(a, b);"\n'
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    errs = static_checks.errors(static_checks.check(src, JudgeConfig()))
    assert errs and errs[0].category.value == "cheating:tampering" and "ExcludeDispatchKeyGuard" in errs[0].message


def test_first_use_imports_no_compiler_stack():
    """TorchDispatchMode wraps __torch_dispatch__ in torch._disable_dynamo unless told not to, and its
    first call imports torch._dynamo: 6 s inside the first judged forward on the H100."""
    import subprocess
    import sys

    code = (
        "import sys, torch\nfrom kernelfix.tools.workers.candidate.recorder import OpRecorder\n"
        "OpRecorder().run(lambda a: a * 2, torch.ones(2))\nprint('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
