"""The exported graph, rewritten into the forward of a task's Model.

What changes from torch.export's graph: parameters, buffers and lifted
constants become attributes of Model (``self.p_fc1_weight``) instead of inputs;
inputs export fixed (None, ints, flags) become their values; a buffer or input
the call updated is written back in place; the outputs take the structure the
module returned (a tuple, a dict); and a device literal becomes the device of
the inputs, so a task captured on one device runs on another.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch.export.graph_signature import ConstantArgument, InputKind, OutputKind, TensorArgument

from kernelfix.capture.check import leaves_with_paths
from kernelfix.capture.errors import CaptureFailed
from kernelfix.capture.schema import InputLeaf, OutputLeaf
from kernelfix.capture.script import CapturedCall, is_user_file
from kernelfix.capture.tensors import describe

_PREFIX = {"parameter": "p_", "buffer": "b_", "constant": "c_"}
_CONTAINERS = (tuple, list, dict)
_OP_NAMESPACES = {"aten", "prims"}


@dataclass
class Attr:
    """A tensor Model holds: a parameter, buffer or constant of the captured module."""

    name: str  # Model's attribute
    key: str  # its name in the captured module, and in the weights file
    kind: Literal["parameter", "buffer", "constant"]
    value: torch.Tensor
    persistent: bool = True  # in the module's state_dict (a non-persistent buffer or a constant is not)


@dataclass
class TaskGraph:
    graph: fx.Graph
    attrs: list[Attr]
    inputs: list[InputLeaf]
    outputs: list[OutputLeaf]
    ops: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)


def task_graph(ep: torch.export.ExportedProgram, call: CapturedCall) -> TaskGraph:
    src = ep.graph
    sig = ep.graph_signature
    leaves, _ = leaves_with_paths((tuple(call.args), dict(call.kwargs)))
    user_specs = [s for s in sig.input_specs if s.kind == InputKind.USER_INPUT]
    if len(user_specs) != len(leaves):
        raise CaptureFailed(
            f"torch.export saw {len(user_specs)} inputs where the call has {len(leaves)}; cannot map them"
        )
    g = fx.Graph()
    env: dict[fx.Node, Any] = {}
    attrs: list[Attr] = []
    attr_nodes: dict[str, fx.Node] = {}  # key -> get_attr node
    inputs: list[InputLeaf] = []
    input_nodes: dict[str, fx.Node] = {}  # export's placeholder name -> ours
    taken: set[str] = set()
    leaf_iter = iter(leaves)
    placeholders = [n for n in src.nodes if n.op == "placeholder"]
    for node, spec in zip(placeholders, sig.input_specs, strict=True):
        if spec.kind == InputKind.USER_INPUT:
            path, value = next(leaf_iter)
            path = _call_path(path)
            if isinstance(spec.arg, TensorArgument) and isinstance(value, torch.Tensor):
                new = g.placeholder(node.name)
                new.meta = dict(node.meta)
                env[node] = input_nodes[node.name] = new
                inputs.append(InputLeaf(path=path, name=new.name, tensor=describe(value)))
            else:  # a value export specialised the graph to
                env[node] = spec.arg.value if isinstance(spec.arg, ConstantArgument) else value
                inputs.append(InputLeaf(path=path, constant=repr(value)))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            kind = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer"}.get(spec.kind, "constant")
            value = call.state.get(spec.target) if kind != "constant" else None
            if value is None:
                value = ep.constants.get(spec.target)
            if not isinstance(value, torch.Tensor):
                raise CaptureFailed(f"no value for {kind} {spec.target!r} of {call.module_path}")
            name = _attr_name(kind, spec.target, taken)
            persistent = kind == "parameter" or (kind == "buffer" and spec.persistent is not False)
            attrs.append(Attr(name=name, key=spec.target, kind=kind, value=value.detach(), persistent=persistent))
            new = g.get_attr(name)
            new.meta = dict(node.meta)
            env[node] = attr_nodes[spec.target] = new
        else:
            raise CaptureFailed(
                f"{call.module_path} takes a {spec.kind.name.lower()} input ({spec.target}): capture supports tensors, parameters and buffers"
            )
    output_node = None
    notes: list[str] = []
    for node in src.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            output_node = node
            break
        reference = _library_reference(node)
        if reference is not None:  # a library's custom operator, written as the torch operator that computes it
            op, mapper = reference
            args, kwargs = mapper(
                *pytree.tree_map(lambda a: env[a] if isinstance(a, fx.Node) else a, (node.args, dict(node.kwargs)))
            )
            env[node] = g.call_function(op, args, kwargs)
            env[node].meta = dict(node.meta)
            notes.append(f"{_qualname(node.target)} is written as {_op_name(op)} (the same computation)")
        else:
            _check_supported(node, call.module_path)
            env[node] = g.node_copy(node, lambda n: env[n])
        env[node].meta["stack_trace"] = _to_user_frame(node.meta.get("stack_trace"))
    assert output_node is not None
    user_values = _write_back(g, output_node, sig, env, attr_nodes, input_nodes, call.module_path)
    out_spec = ep.module_call_graph[0].signature.out_spec
    _check_output_types(out_spec, call.module_path)
    if out_spec.num_leaves != len(user_values):
        raise CaptureFailed(
            f"torch.export returned {len(user_values)} outputs where {call.module_path} returns {out_spec.num_leaves}"
        )
    g.output(pytree.tree_unflatten(user_values, out_spec))
    notes = list(dict.fromkeys(notes)) + _device_literals(g)
    out_leaves, _ = leaves_with_paths(call.output)
    outputs = [
        OutputLeaf(path=p, description=describe(v).describe() if isinstance(v, torch.Tensor) else repr(v))
        for p, v in out_leaves
    ]
    ops = Counter(
        _op_name(n.target) for n in g.nodes if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    )
    return TaskGraph(graph=g, attrs=attrs, inputs=inputs, outputs=outputs, ops=ops, notes=notes)


def _source_line(node: fx.Node) -> str:
    """`` at file.py:123 (code)`` for the innermost user frame export recorded for ``node``, or ""."""
    trace = _to_user_frame(node.meta.get("stack_trace")) or ""
    found = re.findall(r'File "([^"]+)", line (\d+), in \S+\n\s*(.*)', trace)
    if not found:
        return ""
    f, line, code = found[-1]
    from kernelfix.capture.script import shown_path

    return f" at {shown_path(f)}:{line} ({code.strip()})"


def _to_user_frame(trace: str | None) -> str | None:
    """The stack trace cut at the innermost frame of the user's code: the task's comments then quote the
    user's line (``self.proj(self.act(self.fc(x)))``), not torch's (``F.linear(input, ...)``)."""
    if not trace:
        return trace
    frames = re.split(r"(?m)^\s*(?=File \")", trace)
    frames = [f for f in frames if f.strip()]
    user = [i for i, f in enumerate(frames) if (m := re.match(r'File "([^"]+)"', f)) and is_user_file(m[1])]
    return "  " + "  ".join(frames[: user[-1] + 1]) if user else trace


def _call_path(keystr: str) -> str:
    """pytree's "[0][1]" / "[1]['mask']" for the (args, kwargs) pair, as args[1] / kwargs['mask']."""
    m = re.match(r"\[(0|1)\](.*)", keystr)
    if not m:
        return keystr
    return ("args" if m[1] == "0" else "kwargs") + m[2]


def _attr_name(kind: str, key: str, taken: set[str]) -> str:
    base = _PREFIX[kind] + re.sub(r"\W", "_", key)
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _op_name(target: Any) -> str:
    return str(target.overloadpacket).replace("::", ".")


def _qualname(op: Any) -> str:
    return f"{op.namespace}::{op._schema.name.split('::')[-1]}"


def _library_reference(node: fx.Node) -> Any:
    t = node.target
    if node.op != "call_function" or not isinstance(t, torch._ops.OpOverload) or t.namespace in _OP_NAMESPACES:
        return None
    from kernelfix.capture.library_ops import reference_for

    return reference_for(_qualname(t))


def _check_supported(node: fx.Node, module_path: str) -> None:
    if node.op == "get_attr":
        raise CaptureFailed(
            f"{module_path}'s graph holds a subgraph ({node.target}): control flow (torch.cond, a no_grad or autocast region) is not captured yet"
        )
    if node.op != "call_function":
        return
    t = node.target
    if isinstance(t, torch._ops.HigherOrderOperator):
        raise CaptureFailed(
            f"{module_path}'s graph uses {t.name()} (control flow, or a no_grad/autocast region inside forward): not captured yet"
        )
    if isinstance(t, torch._ops.OpOverload) and t.namespace not in _OP_NAMESPACES:
        where = _source_line(node)
        raise CaptureFailed(
            f"cannot capture {module_path}: it calls the custom operator {_qualname(t)}{where}, and a task holds only torch's "
            "own operators (its reference must run anywhere the judge does). Capture a submodule that does not call it, or "
            "have the module compute it with torch operators while captured (a plain-PyTorch implementation of that step)."
        )


def _write_back(g, output_node, sig, env, attr_nodes, input_nodes, module_path) -> list[Any]:
    """Emit the in-place updates the graph returns as outputs (functional buffer or input mutations); the user outputs."""
    user: list[Any] = []
    for value, spec in zip(output_node.args[0], sig.output_specs, strict=True):
        mapped = env[value] if isinstance(value, fx.Node) else value
        if spec.kind == OutputKind.USER_OUTPUT:
            user.append(mapped)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            g.call_function(torch.ops.aten.copy_.default, (attr_nodes[spec.target], mapped))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            g.call_function(torch.ops.aten.copy_.default, (input_nodes[spec.target], mapped))
        else:
            raise CaptureFailed(
                f"{module_path}'s graph returns a {spec.kind.name.lower()}: capture supports forward computations only"
            )
    return user


def _check_output_types(spec: pytree.TreeSpec, module_path: str) -> None:
    if spec.is_leaf():
        return
    if spec.type not in _CONTAINERS:
        raise CaptureFailed(
            f"{module_path} returns a {spec.type.__name__}: capture supports tensors and tuples, lists and dicts of them "
            "(return a plain tuple or dict from the module, or capture the submodules inside it)"
        )
    for child in spec.children() if hasattr(spec, "children") else spec.children_specs:  # children(): torch >= 2.9
        _check_output_types(child, module_path)


def _device_literals(g: fx.Graph) -> list[str]:
    """Make device arguments the inputs' device (or the weights'), so the task runs wherever the judge puts it."""
    anchor = next((n for n in g.nodes if n.op == "placeholder"), None) or next(
        (n for n in g.nodes if n.op == "get_attr"), None
    )
    users = [
        n
        for n in g.nodes
        if n.op == "call_function" and any(isinstance(a, torch.device) for a in pytree.tree_leaves((n.args, n.kwargs)))
    ]
    if not users:
        return []
    if anchor is None:
        return [
            "the graph names a device and has no tensor input or weight to take one from: it runs on the captured device only"
        ]
    first = next(n for n in g.nodes if n.op not in ("placeholder", "get_attr"))
    with g.inserting_before(first):
        device = g.create_node("call_function", getattr, (anchor, "device"), name="inputs_device")
    for n in users:
        n.args, n.kwargs = pytree.tree_map(lambda a: device if isinstance(a, torch.device) else a, (n.args, n.kwargs))
    return []
