"""A swap costs nothing it need not (issue 35): the call check once per kind of call, the compiled model's
path (traced, or the custom operator), and a call of another shape under torch.compile(fullgraph=True)
handed to the original module instead of failing inside Dynamo.

The swapped kernel is plain torch (tests/test_capture_swap.py's Scaled: keyword arguments, a dict
output, captured in training), so Dynamo traces it on the CPU; Triton's side is in
tests/test_capture_shapes.py (its interpreter on the CPU) and the GPU tests at the end."""

from __future__ import annotations

import contextlib
import sys
import warnings

import pytest
import torch
import torch.nn as nn
from test_capture_swap import KERNEL, _capture, _session

import kernelfix
from kernelfix.capture.calls import call_key
from kernelfix.capture.errors import CallMismatch


@contextlib.contextmanager
def _bench_on_path():
    """bench/ (not a package) on sys.path while its modules are imported, then sys.path as it was: a judge started
    later in this process keys its fork servers by sys.path (kernelfix.sandbox.zygote), and a lasting change here (one
    more entry per test that inserted it) had the next judge start new ones."""
    from test_capture_swap import ROOT

    saved = sys.path[:]
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        yield
    finally:
        sys.path[:] = saved


@pytest.fixture(scope="module")
def swapped_session(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("swap_cost")
    task, model = _capture(tmp)
    return _session(tmp, task, KERNEL.format(wrong="")), model


class Host(nn.Module):
    """A model that calls the swapped module at its captured shape and at one it was not captured at."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, x, x2):
        a = self.inner(x, scale=torch.full((4, 4), 0.5), causal=True)["y"]
        b = self.inner(x2, scale=torch.full((2, 4), 0.5), causal=True)["y"]
        return a + 1, b * 2


def _graphs():
    """A torch.compile backend that keeps Dynamo's graphs and runs them as they are."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def _targets(graphs) -> set[str]:
    return {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}


def test_the_call_check_runs_once_per_kind_of_call(swapped_session):
    session, model = swapped_session
    swapped = kernelfix.load_best(session, model.inner, trace=False)
    x, s = torch.randn(4, 4), torch.full((4, 4), 0.5)
    start = swapped.calls.full_checks
    with torch.no_grad():
        for _ in range(5):
            got = swapped(x, scale=s, causal=True)
        assert torch.equal(got["y"], model.inner(x, scale=s, causal=True)["y"])
        assert swapped.calls.full_checks == start  # the load's own check already answered this kind of call
        for _ in range(3):  # keywords in another order: a kind of its own, checked once, the tensors put in order
            got = swapped(x, causal=True, scale=s * 2)
        assert (
            torch.equal(got["y"], model.inner(x, scale=s * 2, causal=True)["y"])
            and swapped.calls.full_checks == start + 1
        )
        # another value where export fixed one: checked once, warned once, handed to the original every time
        with pytest.warns(UserWarning, match=r"kwargs\['causal'\] is False; the capture fixed it to True"):
            swapped(x, scale=s, causal=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = swapped(x, scale=s, causal=False)
        assert torch.equal(out["y"], model.inner(x, scale=s, causal=False)["y"])
        assert swapped.fallbacks == 2 and swapped.calls.full_checks == start + 2
    # what the key tells apart, the check tells apart: True from 1, a tuple from a list, shapes, dtypes
    t = torch.zeros(2, 3)
    keys = [call_key(a, {})[0] for a in [(t, True), (t, 1), (t, 1.0), (t, (1,)), (t, [1]), (t.double(), 1), (t.T, 1)]]
    assert len(set(keys)) == len(keys)
    assert call_key((t, object()), {}) is None  # an opaque value: no key, the full check every time


def test_compiled_call_of_another_shape_runs_the_original(swapped_session):
    """The held-out model's bug: under fullgraph=True a call the swap was not captured at died inside
    Dynamo (str() of CallMismatch). Now the match is decided by guards and the original runs it."""
    session, model = swapped_session
    x, x2 = torch.randn(4, 4), torch.randn(2, 4)
    want = Host(model.inner)(x, x2)
    for trace in (None, False):
        swapped = kernelfix.load_best(session, model.inner, trace=trace)
        graphs, backend = _graphs()
        checked = swapped.calls.full_checks
        with torch.no_grad():
            got = torch.compile(Host(swapped), fullgraph=True, backend=backend)(x, x2)
        assert (
            swapped.calls.full_checks == checked
        )  # the compiled path never runs the eager check (its messages are str())
        assert all(torch.allclose(g, w) for g, w in zip(got, want))
        ops = {t for t in _targets(graphs) if t.startswith("kernelfix.")}
        if trace is None:  # traced: the kernel's own ops in the graph, no opaque operator
            assert swapped.compile_path.kind == "traced" and ops == set()
        else:
            assert swapped.compile_path.kind == "custom_op" and ops == {
                f"kernelfix.{swapped.op_name.split('::')[1]}.default"
            }
        assert len(graphs) == 1 and swapped.fallbacks == 0  # the compiled fallback is not counted (no Python state)


def test_compiled_call_of_another_shape_without_the_original_refuses_clearly(swapped_session):
    session, _ = swapped_session
    bare = kernelfix.load_best(session)
    x, x2 = torch.randn(4, 4), torch.randn(2, 4)
    with pytest.raises(
        Exception, match="torch.compile traced a call unlike every captured one, and there is no original module"
    ):
        torch.compile(Host(bare), fullgraph=True, backend="eager")(x, x2)
    torch._dynamo.reset()
    # without fullgraph Dynamo breaks the graph there and the call runs eager: the full check names the difference
    with pytest.raises(CallMismatch, match=r"args\[0\] is float32\[2, 4\]; the kernel was judged on float32\[4, 4\]"):
        torch.compile(Host(bare), backend="eager")(x, x2)


TRACE_TRITON = """
import json, sys
import torch.utils._triton
torch.utils._triton.has_triton = lambda: True  # Dynamo's Triton support, off without a GPU: on, for tracing only
import torch
import torch.nn as nn
from kernelfix.capture.captured_kernel import CapturedKernel
from kernelfix.capture.compile_path import graph_kernels
from kernelfix.capture.files import CaptureFiles, import_file
from kernelfix.capture.pipeline import capture
from kernelfix.capture.schema import CompilePath

from pathlib import Path

script, task, best = map(Path, sys.argv[1:4])
capture(script, "model.act", task, calls="all", script_args=["cpu", "64x1024", "8x100"], force=True)
swapped = CapturedKernel(import_file(best, "best").ModelNew(), CaptureFiles(task).read_manifest(), nn.ReLU())
swapped.use_traced(CompilePath(kind="traced", note="as load_best sets it once its check passed on the GPU"))
graphs = []

def backend(gm, example_inputs):  # keep the graph; the kernel cannot run here
    graphs.append(gm)
    outs = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return lambda *a: tuple(torch.zeros(o.meta["example_value"].shape) for o in outs)

class Host(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.act = act
    def forward(self, a, b):
        return self.act(a) + 1, self.act(b)

torch.compile(Host(swapped), fullgraph=True, backend=backend)(torch.randn(64, 1024), torch.randn(3, 5))
print(json.dumps({"graphs": len(graphs), "kernels": graph_kernels(graphs),
                  "targets": sorted({str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"})}))
"""


def test_a_triton_kernel_is_traced_not_an_opaque_operator(tmp_path):
    """The compiled path that load_best takes on the GPU for a Triton kernel: Dynamo traces the launch
    into a triton_kernel_wrapper_mutation node (Inductor then calls the kernel itself), no custom
    operator, and the uncaptured call is the original's relu. On the CPU, Triton runs only in its
    interpreter, so this traces without running (a GPU test runs it)."""
    import json
    import os
    import subprocess

    with _bench_on_path():
        from swap_cost import SCRIPT, kernel_source

    (tmp_path / "user.py").write_text(SCRIPT)
    (tmp_path / "best.py").write_text(kernel_source("triton"))
    (tmp_path / "trace.py").write_text(TRACE_TRITON)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [
            sys.executable,
            "-P",
            str(tmp_path / "trace.py"),
            str(tmp_path / "user.py"),
            str(tmp_path / "act.py"),
            str(tmp_path / "best.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(run.stdout.splitlines()[-1])
    assert r["graphs"] == 1 and r["kernels"] == ["triton:relu_kernel"]
    assert "triton_kernel_wrapper_mutation" in r["targets"] and not any(
        t.startswith("kernelfix.") for t in r["targets"]
    )
    assert any(
        t.startswith("<function relu ") for t in r["targets"]
    )  # the uncaptured call: the original nn.ReLU, in the graph


# --------------------------------------------------------------------------- on the GPU


def _gpu_session(tmp_path, kind: str):
    """A ReLU captured on the GPU at two shapes, and a session whose best.py is bench/swap_cost.py's `kind` kernel."""
    from kernelfix.agent.agent_config import AgentConfig
    from kernelfix.agent.session_dir import SessionDir
    from kernelfix.capture.pipeline import capture
    from kernelfix.tools.config import JudgeConfig
    from kernelfix.tools.task import Task

    with _bench_on_path():
        from swap_cost import SCRIPT, kernel_source

    script, task, session = tmp_path / "user.py", tmp_path / "act.py", tmp_path / f"session_{kind}"
    script.write_text(SCRIPT)
    capture(script, "model.act", task, calls="all", script_args=["cuda", "64x1024", "512x2048"], force=True)
    SessionDir.create(
        session, task=Task.load(task), model="replay:none", agent=AgentConfig(), judge=JudgeConfig(device="cuda")
    )
    (session / "best.py").write_text(kernel_source(kind))
    return session


class Shapes(nn.Module):
    """Calls the swapped ReLU at both captured shapes and at one it was not captured at."""

    def __init__(self, act: nn.Module):
        super().__init__()
        self.act = act

    def forward(self, a, b, c):
        return self.act(a) + 1, self.act(b) * 2, self.act(c) - 1


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["triton", "cuda"])
def test_on_the_gpu_the_swap_is_traced_and_runs_in_cuda_graphs(tmp_path, kind):
    """Triton: Dynamo traces the launch (no opaque operator); CUDA: the extension's function is a C++
    operator. Both compile whole with Inductor, run under mode="reduce-overhead" without a cudagraph
    skip, hand the uncaptured shape to the original, and match; so does the custom operator's path."""
    from torch._dynamo.utils import counters

    session = _gpu_session(tmp_path, kind)
    swapped = kernelfix.load_best(session, nn.ReLU())
    p = swapped.compile_path
    print(f"[cuda] {kind}: {p.kind} via {p.backend}, calls {p.kernels}: {p.note}")
    assert p.kind == "traced" and p.backend == "inductor" and swapped.op_name is None
    if kind == "triton":
        assert p.kernels == ["triton:relu_kernel"]
    else:
        assert len(p.kernels) == 1 and p.kernels[0].startswith("kernelfix_") and p.kernels[0].endswith("relu_cuda")
    xs = [
        torch.randn(64, 1024, device="cuda"),
        torch.randn(512, 2048, device="cuda"),
        torch.randn(64, 256, device="cuda"),
    ]
    want = Shapes(nn.ReLU())(*xs)
    opaque = kernelfix.load_best(session, nn.ReLU(), trace=False)
    for module in (swapped, opaque):
        model = Shapes(module)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(*xs)
        assert explained.graph_break_count == 0
        ops = {str(n.target) for g in explained.graphs for n in g.graph.nodes if str(n.target).startswith("kernelfix.")}
        assert ops == (set() if module is swapped else {f"kernelfix.{opaque.op_name.split('::')[1]}.default"})
        for opts in (dict(fullgraph=True), dict(fullgraph=True, mode="reduce-overhead")):
            torch._dynamo.reset()
            counters.clear()
            compiled = torch.compile(model, **opts)
            with torch.no_grad():
                for _ in range(3):  # reduce-overhead: warm-up, record, replay
                    got = compiled(*xs)
            assert all(torch.equal(g, w) for g, w in zip(got, want)), opts
            assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
        assert module.fallbacks == 0  # the compiled fallback runs in the graph, uncounted


def test_a_trace_that_fails_on_an_fp64_scalar_says_why_and_how_to_fix_it():
    """Inductor's error for a Triton kernel whose float argument it typed fp64 (seen on the H100 with the
    tune example's attention): the reason names the innermost cause and the cast that fixes it."""
    from kernelfix.capture.compile_path import _trace_failure

    try:
        try:
            raise AssertionError(
                "at 18:8:\n    o = tl.dot(p, v)\n        ^\nBoth operands must be same dtype. Got fp64 and fp32"
            )
        except AssertionError as inner:
            raise RuntimeError("backend='inductor' raised:\nCompilationError") from inner
    except RuntimeError as e:
        why = _trace_failure(e)
    assert "Got fp64 and fp32" in why and "tl.constexpr" in why
    assert (
        _trace_failure(ValueError("plain"))
        == "Dynamo cannot trace the kernel's forward with fullgraph=True (ValueError: plain)"
    )


class _KernelHost(nn.Module):
    """The baseline a swap's compiled call is held to: the kernel's own module called directly on the tensors."""

    def __init__(self, kernel: nn.Module):
        super().__init__()
        self.kernel = kernel

    def forward(self, x, s):
        return self.kernel(x, s)


class _SwapHost(nn.Module):
    def __init__(self, swapped: nn.Module):
        super().__init__()
        self.swapped = swapped

    def forward(self, x, s):
        return self.swapped(x, scale=s, causal=True)


def _compiled_entry(host: nn.Module, *args):
    """Dynamo's graph and guard tree for ``host`` compiled whole (fullgraph, static shapes) on ``args``."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    graphs, backend = _graphs()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(host, fullgraph=True, dynamic=False, backend=backend)(*args)
    (entry,) = _debug_get_cache_entry_list(type(host).forward.__code__)
    (graph,) = graphs
    return [str(n.target) for n in graph.graph.nodes if n.op == "call_function"], str(entry.guard_manager)


def test_a_compiled_swap_adds_no_graph_node_and_no_python_guard(swapped_session):
    """What a traced swap costs a compiled call above its kernel's own is guards only: the same graph,
    node for node, and no guard that Dynamo evaluates in Python (an object-aliasing guard, from reading
    the torch module through a second module, cost one a call; bench/swap_cost_explain.py shows it)."""
    with _bench_on_path():  # swap_cost_explain puts bench/ on sys.path itself
        from swap_cost_explain import guard_kinds, python_guards

    session, model = swapped_session
    swapped = kernelfix.load_best(session, model.inner)
    assert swapped.compile_path.kind == "traced"
    x, s = torch.randn(4, 4), torch.full((4, 4), 0.5)
    kernel_nodes, kernel_guards = _compiled_entry(_KernelHost(swapped.kernel), x, s)
    swap_nodes, swap_guards = _compiled_entry(_SwapHost(swapped), x, s)
    assert swap_nodes == kernel_nodes
    assert python_guards(swap_guards) == python_guards(kernel_guards)
    extra = guard_kinds(swap_guards)
    extra.subtract(guard_kinds(kernel_guards))
    # The match's guards: the signature (one EQUALS_MATCH on it, its length and type), the module's own
    # type and dict, the builtins and functions the match calls; none per element, none per call.
    assert sum(extra.values()) <= 30, (dict(extra), swap_guards)
    assert set(k for k, v in extra.items() if v > 0) <= {
        "ID_MATCH",
        "TYPE_MATCH",
        "DICT_CONTAINS",
        "EQUALS_MATCH",
        "LENGTH_CHECK",
        "NONE_MATCH",
    }, dict(extra)
