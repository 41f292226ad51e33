"""How a swapped kernel runs under torch.compile: traced, where that was checked to work, else one opaque operator.

Traced, Dynamo reads the kernel's forward like any other module's: a Triton launch
(``kernel[grid](...)``) becomes a ``triton_kernel_wrapper_mutation`` node that Inductor calls
from its own generated code, a C++ operator (capture/cpp_ops.py) an extern call, torch ops
ordinary nodes. The compiled model then runs no Python of the swap's at all, and a CUDA graph
(``mode="reduce-overhead"``) holds the kernel like any other. As an opaque custom operator
(capture/custom_op.py) every compiled call goes back to Python to run the kernel's forward.

Whether Dynamo can trace a candidate's forward is not known from its source (it may read
``x.data_ptr()``, call a pybind function, build a grid in a way Dynamo refuses), so
:func:`choose_compile_path` tries: it compiles the swapped module with ``fullgraph=True``
(Inductor on a GPU, ``aot_eager`` on the CPU), runs it on every captured call and compares
with the captured output within the judge's tolerance (and, for a task with a backward, the
gradients with the eager kernel's). Only a trace that compiles whole and matches everywhere is
kept; anything else, the custom operator, with the reason in ``CompilePath.note``. Triton's
CPU interpreter is plain Python that Dynamo would trace into, so on the CPU a Triton kernel
always takes the operator.
"""

from __future__ import annotations

import contextlib
import logging
import types
import warnings
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

from kernelfix.capture.captured_kernel import CapturedKernel, CheckCall
from kernelfix.capture.check import compare_outputs
from kernelfix.capture.errors import SwapError
from kernelfix.capture.schema import CompilePath, SwapCheck
from kernelfix.tools.config import JudgeConfig


def choose_compile_path(
    module: CapturedKernel,
    reference: Callable[[], nn.Module],
    calls: list[CheckCall],
    config: JudgeConfig,
    *,
    trace: bool | None = None,
    backend: str | None = None,
) -> CompilePath:
    """Set ``module``'s path under torch.compile; ``reference`` builds the task's Model on the meta device
    (the operator's shape rule), only when the operator is taken. ``trace``: see load_best."""
    if trace is False:
        module.use_custom_op(reference(), note="asked for (load_best(trace=False))")
        return module.compile_path
    interpreted = interpreted_triton(module.kernel)
    extensions = getattr(module, "extensions", None)
    path, reason = None, None
    if interpreted:
        reason = f"Triton's CPU interpreter runs {interpreted}, and it is Python that Dynamo would trace into"
    elif not calls:
        reason = "no captured call to check a traced kernel on"
    elif extensions is not None and extensions.extensions:
        from kernelfix.capture.cpp_ops import observe

        reason = observe(extensions, module, calls)  # the C++ operators' shape rules, from the kernel's eager calls
    if reason is None:
        path, reason = probe_trace(module, calls, config, backend=backend)
    if path is not None:
        module.use_traced(path)
        return path
    if trace:
        raise SwapError(f"{module.manifest.module_path}: torch.compile cannot take the kernel traced: {reason}")
    module.use_custom_op(reference(), note=reason)
    return module.compile_path


def probe_trace(
    module: CapturedKernel, calls: list[CheckCall], config: JudgeConfig, *, backend: str | None = None
) -> tuple[CompilePath | None, str]:
    """The traced path, checked on ``calls``; or None and why it cannot be taken."""
    device = next(
        (t.device for c in calls for t in pytree.tree_leaves((c.args, c.kwargs)) if isinstance(t, torch.Tensor)),
        torch.device("cpu"),
    )
    name = backend or ("inductor" if device.type == "cuda" else "aot_eager")  # aot_eager: no C++ build on the CPU
    graphs: list[torch.fx.GraphModule] = []
    inner = torch._dynamo.lookup_backend(name)

    def recording(gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        graphs.append(gm)
        return inner(gm, example_inputs)

    # A function of its own code object: Dynamo keeps compiled code per code object, so each probe has
    # its own cache (gone with it) and never fills the one the user's compiled model uses.
    call = types.FunctionType(_call.__code__.replace(), _call.__globals__, "kernelfix_trace_probe")
    compiled = torch.compile(call, fullgraph=True, backend=recording)
    before = (module._op, module._out_layout, module.op_name, module.compile_path)
    module.use_traced(CompilePath(kind="traced", note="being checked"))
    checks: list[SwapCheck] = []
    # One compiled entry per captured shape (twice with gradients): past Dynamo's recompile limit it would run
    # the calls eagerly without a word, and the check would pass on what it did not compile.
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    try:
        with warnings.catch_warnings(), _quiet_inductor(), torch._dynamo.config.patch({limit: max(64, 4 * len(calls))}):
            warnings.simplefilter("ignore")  # Dynamo's hints about what it cannot trace: the reason says it
            for c in calls:
                with torch.no_grad():
                    got = compiled(module, c.args, c.kwargs)
                out = compare_outputs(got, c.want, config)
                checks.append(SwapCheck(ok=out.ok, against=c.against, output=out, input_set=c.input_set))
                if not out.ok:
                    return _undo(
                        module, before, f"compiled, the kernel does not reproduce the captured call ({out.summary()})"
                    )
                if module.manifest.backward:
                    grads = _gradients(module, compiled, c, config)
                    checks.append(
                        SwapCheck(
                            ok=grads.ok,
                            against="gradients",
                            output=grads,
                            input_set=c.input_set,
                            note="the compiled kernel's gradients against the eager kernel's",
                        )
                    )
                    if not grads.ok:
                        return _undo(
                            module,
                            before,
                            f"compiled, the kernel's gradients differ from its eager ones ({grads.summary()})",
                        )
    except Exception as e:  # Dynamo's Unsupported, a backend's error, anything the candidate's code raises when traced
        return _undo(module, before, _trace_failure(e))
    if not graphs:
        return _undo(module, before, "torch.compile produced no graph for the kernel")
    path = CompilePath(
        kind="traced",
        backend=name,
        kernels=graph_kernels(graphs),
        checks=checks,
        note=f"checked compiled with {name} at every captured call"
        + (", gradients included" if module.manifest.backward else ""),
    )
    module.use_traced(path)
    return path, ""


def interpreted_triton(kernel: nn.Module) -> str | None:
    """The name of a Triton kernel of ``kernel``'s source that runs in Triton's interpreter, if any."""
    import sys

    source = sys.modules.get(type(kernel).__module__)
    for name, value in vars(source).items() if source is not None else ():
        while type(value).__name__ in ("Autotuner", "Heuristics"):  # they wrap the kernel in .fn
            value = getattr(value, "fn", None)
        if type(value).__name__ == "InterpretedFunction":
            return name
    return None


def _call(module: nn.Module, args: tuple, kwargs: dict) -> Any:
    return module(*args, **kwargs)


def _undo(module: CapturedKernel, before: tuple, reason: str) -> tuple[None, str]:
    module._op, module._out_layout, module.op_name, module.compile_path = before
    return None, reason


@contextlib.contextmanager
def _quiet_inductor():
    """Inductor logs a Triton kernel it cannot compile at ERROR, dozens of lines; the probe's reason says it in one."""
    log = logging.getLogger("torch._inductor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


# Inductor types a Python float passed to a user-defined Triton kernel as fp64 (eager Triton: fp32), so
# `x * scale` is promoted to float64 inside the kernel (pytorch/pytorch#190340): a tl.dot then fails on
# mixed operands, and a kernel that compiles runs its arithmetic in FP64.
_FP64_SCALAR = ("Got fp64 and fp32", "Got fp32 and fp64")


def _trace_failure(e: BaseException) -> str:
    """Why the traced path failed: the innermost cause's last line, and the fix where it is known."""
    inner = e
    while inner.__cause__ is not None:
        inner = inner.__cause__
    lines = [ln.strip() for ln in f"{type(inner).__name__}: {inner}".strip().splitlines() if ln.strip()]
    text = lines[-1] if lines else type(inner).__name__
    text = text if len(text) <= 300 else text[:297] + "..."
    why = (
        f"torch.compile with fullgraph=True cannot take the kernel's forward ({_first_line(e)}; {text})"
        if inner is not e
        else f"Dynamo cannot trace the kernel's forward with fullgraph=True ({_first_line(e)})"
    )
    if any(s in f"{inner}" for s in _FP64_SCALAR):
        why += (
            "; Inductor passes a Python float argument of a Triton kernel as fp64 where Triton itself passes fp32: "
            "pass it as a tl.constexpr (or cast it in the kernel: scale.to(tl.float32)) and the kernel can be traced"
        )
    return why


def _first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip().splitlines()[0]
    return text if len(text) <= 300 else text[:297] + "..."


def _gradients(module: CapturedKernel, compiled: Callable, c: CheckCall, config: JudgeConfig):
    """The compiled module's gradients (inputs and the kernel's parameters) against the eager module's,
    for the same upstream gradients."""
    params = [p for p in module.kernel.parameters() if p.requires_grad]

    def run(fn: Callable) -> list[torch.Tensor | None]:
        leaves, spec = pytree.tree_flatten((c.args, c.kwargs))
        leaves = [
            t.detach().clone().requires_grad_(True) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
            for t in leaves
        ]
        args, kwargs = pytree.tree_unflatten(leaves, spec)
        outs = [o for o in pytree.tree_leaves(fn(args, kwargs)) if isinstance(o, torch.Tensor) and o.requires_grad]
        gen = torch.Generator(device="cpu").manual_seed(0)
        upstream = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.device, o.dtype) for o in outs]
        wrt = [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad] + params
        return list(torch.autograd.grad(outs, wrt, upstream, allow_unused=True)) if outs and wrt else []

    want = run(lambda a, k: module(*a, **k))
    got = run(lambda a, k: compiled(module, a, k))
    return compare_outputs(got, want, config)


def graph_kernels(graphs: list[torch.fx.GraphModule]) -> list[str]:
    """What the traced graphs call besides torch's own ops: Triton kernels, C++ operators."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table, triton_kernel_wrapper_mutation

    names: list[str] = []
    for gm in graphs:
        for node in gm.graph.nodes:
            if node.op != "call_function":
                continue
            name = None
            try:  # a name for the report only: what torch keeps where may move between versions
                if node.target is triton_kernel_wrapper_mutation:
                    kernel = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])
                    while not hasattr(kernel, "__name__") and hasattr(kernel, "fn"):  # JITFunction, Autotuner: .fn
                        kernel = kernel.fn
                    name = f"triton:{getattr(kernel, '__name__', 'kernel')}"
                elif isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                    if str(node.target).split(".")[0] not in ("aten", "prims"):
                        name = str(node.target)
            except Exception:  # noqa: BLE001
                name = "an unnamed kernel"
            if name and name not in names:
                names.append(name)
    return names
