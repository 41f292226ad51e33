"""The shape block of a first prompt: shapes, strides and contiguity of a task's tensors.

The task is user code, so it runs in a sandboxed child (``python -m
kernelfix.agent.shapes SPEC``), on the CPU. The child traces ``Model`` with
torch.fx and runs ShapeProp under a FakeTensorMode (shapes without compute);
when tracing fails it runs ``forward`` once and describes inputs and outputs.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

MAX_NODES = 40
MAX_PARAMS = 12


def shape_block(
    task_path: str | Path, *, timeout_s: float = 120.0, memory_bytes: int | None = None
) -> tuple[str | None, str | None]:
    """(block, problem): the text for the prompt, or None and why not."""
    from kernelfix.sandbox import Limits, run_child, scrubbed_env

    with tempfile.TemporaryDirectory(prefix="kernelfix-shapes-") as wd:
        spec = Path(wd) / "spec.json"
        spec.write_text(json.dumps({"task_path": str(Path(task_path).resolve())}))
        env = scrubbed_env({"HOME": wd, "TMPDIR": wd, "CUDA_VISIBLE_DEVICES": ""})
        outcome = run_child(
            [sys.executable, "-m", "kernelfix.agent.shapes", str(spec)],
            cwd=wd,
            env=env,
            limits=Limits(wall_s=timeout_s, memory_bytes=memory_bytes),
        )
    result = outcome.last("result")
    if result is not None:
        return result["block"], None
    err = outcome.last("error")
    if outcome.timed_out:
        return None, f"shape propagation did not finish within {timeout_s:g} s"
    if err is not None:
        return None, f"shape propagation failed: {err['message']}"
    return (
        None,
        f"shape propagation died ({outcome.signal or f'exit code {outcome.returncode}'}): {outcome.stderr_tail.strip()[-300:]}",
    )


# --------------------------------------------------------------------------- child side


def _fmt_meta(meta: Any) -> str:
    import torch

    dtype = str(meta.dtype).removeprefix("torch.")
    layout = {
        torch.contiguous_format: "contiguous",
        torch.channels_last: "channels_last",
        torch.channels_last_3d: "channels_last_3d",
    }
    fmt = layout.get(meta.memory_format, "non-contiguous")
    return f"{dtype}[{', '.join(map(str, meta.shape))}], strides {tuple(meta.stride)}, {fmt}"


def _fmt_value(value: Any) -> str:
    import torch
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    if isinstance(value, torch.Tensor):
        return _fmt_meta(_extract_tensor_metadata(value))
    if isinstance(value, (tuple, list)):
        return "(" + "; ".join(_fmt_value(v) for v in value) + ")"
    return f"{type(value).__name__} {value!r}"[:120]


def _node_meta(node: Any) -> str:
    meta = node.meta.get("tensor_meta")
    if meta is None:
        return "?"
    if not hasattr(meta, "shape") and isinstance(meta, (tuple, list)):  # TensorMetadata is itself a tuple
        return "(" + "; ".join(_fmt_meta(m) for m in meta if hasattr(m, "shape")) + ")"
    return _fmt_meta(meta)


def _fmt_arg(a: Any) -> str:
    if hasattr(a, "op") and hasattr(a, "name"):  # an fx Node
        return a.name
    if isinstance(a, (tuple, list)):
        return "(" + ", ".join(_fmt_arg(x) for x in a) + ("," if len(a) == 1 else "") + ")"
    return repr(a)[:40]


def _describe(model: Any, inputs: list[Any]) -> str:
    import torch
    from torch.fx.passes.shape_prop import ShapeProp

    lines = ["inputs:"]
    lines += [f"  arg {i}: {_fmt_value(x)}" for i, x in enumerate(inputs)]
    params = list(model.named_parameters())
    if params:
        lines.append("parameters:")
        lines += [f"  {name}: {_fmt_value(p.detach())}" for name, p in params[:MAX_PARAMS]]
        if len(params) > MAX_PARAMS:
            lines.append(f"  ... {len(params) - MAX_PARAMS} more")
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        gm = torch.fx.symbolic_trace(model)
        ShapeProp(gm, fake_mode=FakeTensorMode(allow_non_fake_inputs=True)).propagate(*inputs)
    except Exception as e:  # data-dependent control flow, untraceable ops: run it for real instead
        with torch.no_grad():
            out = model(*inputs)
        lines.append(f"output: {_fmt_value(out)}")
        lines.append(f"(no per-op shapes: torch.fx could not trace Model: {type(e).__name__})")
        return "\n".join(lines)
    ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else [out_node.args[0]]
    lines.append("output:")
    lines += [f"  {getattr(o, 'name', o)}: {_node_meta(o) if hasattr(o, 'meta') else repr(o)}" for o in outs]
    lines.append(f"ops in Model.forward ({len(ops)}):")
    for n in ops[:MAX_NODES]:
        target = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
        args = ", ".join([_fmt_arg(a) for a in n.args] + [f"{k}={_fmt_arg(v)}" for k, v in n.kwargs.items()])
        lines.append(f"  {n.name} = {target}({args}): {_node_meta(n)}")
    if len(ops) > MAX_NODES:
        lines.append(f"  ... {len(ops) - MAX_NODES} more")
    return "\n".join(lines)


def _child(spec_path: str) -> None:
    import importlib.util

    from kernelfix.sandbox.channel import MSG_FD_ENV

    fd = int(os.environ[MSG_FD_ENV])

    def send(**msg: Any) -> None:
        os.write(fd, (json.dumps(msg, default=str) + "\n").encode())

    try:
        spec = json.loads(Path(spec_path).read_text())
        mspec = importlib.util.spec_from_file_location("kernelfix_task", spec["task_path"])
        mod = importlib.util.module_from_spec(mspec)
        sys.modules["kernelfix_task"] = mod
        mspec.loader.exec_module(mod)
        import torch  # after the task's own imports (torch among them): a task that fails to import says so at once

        torch.manual_seed(0)
        model = mod.Model(*mod.get_init_inputs()).eval()
        inputs = list(mod.get_inputs())
        send(type="result", block=_describe(model, inputs))
    except BaseException as e:  # the task's own failure, reported, never raised past the pipe
        send(type="error", message=f"{type(e).__name__}: {str(e)[:500]}")


if __name__ == "__main__":
    _child(sys.argv[1])
