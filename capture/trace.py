"""torch.export of the captured call, and errors that name what it could not trace."""

from __future__ import annotations

import contextlib
import io
import linecache
import logging
import os
import re
import traceback

import torch

from kernelfix.capture.errors import CaptureFailed, Untraceable
from kernelfix.capture.script import CapturedCall, is_user_file, shown_path

_DATA_DEPENDENT = ("GuardOnDataDependentSymNode", "data-dependent")
_READS = (".item()", ".tolist()", "int(", "float(", "bool(")
# (tests on the exception's type name and message, construct named to the user, what to do about it)
_KNOWN = (
    ((".numpy()", "numpy"), "a conversion of a tensor to NumPy", "keep the computation in torch"),
    (
        ("no fake impl", "Meta kernel", "meta device"),
        "an operator torch.export has no shape rule for (a custom op without a fake/meta kernel)",
        "register a fake kernel for it (torch.library.register_fake)",
    ),
)


def export_call(
    call: CapturedCall, others: list[CapturedCall] = (), notes: list[str] | None = None
) -> torch.export.ExportedProgram:
    """The call traced by torch.export (non-strict: the module's own Python runs, on fake tensors). With
    ``others`` (calls of other shapes), each dimension that differs between the calls is exported dynamic,
    so the one graph computes every captured shape."""
    if call.autocast:
        raise CaptureFailed(
            f"{call.module_path} ran under torch.autocast ({', '.join(call.autocast)}): the task would compute in full precision "
            "and not reproduce it; capture it without autocast (or make the dtype casts explicit in the module)"
        )
    from kernelfix.capture.library_ops import traceable_experts

    try:
        with (
            _quiet(),
            torch.set_grad_enabled(call.grad_enabled),
            traceable_experts(call.module, notes if notes is not None else []),
        ):
            return torch.export.export(
                call.module, call.args, call.kwargs, strict=False, dynamic_shapes=dynamic_shapes(call, others)
            )
    except Exception as e:
        raise untraceable(e, call.module_path) from e


def dynamic_shapes(call: CapturedCall, others: list[CapturedCall]) -> dict | None:
    """export's dynamic_shapes: by the forward's argument names, Dim.AUTO for the dims that vary across the calls."""
    import inspect

    import torch.utils._pytree as pytree

    if not others:
        return None
    flats = [pytree.tree_leaves((tuple(c.args), dict(c.kwargs))) for c in (call, *others)]
    varying: list[set[int]] = []
    for i, leaf in enumerate(flats[0]):
        dims = set()
        if isinstance(leaf, torch.Tensor):
            for other in flats[1:]:
                o = other[i]
                dims |= {
                    d
                    for d in range(leaf.dim())
                    if isinstance(o, torch.Tensor) and o.dim() == leaf.dim() and o.shape[d] != leaf.shape[d]
                }
        varying.append(dims)
    if not any(varying):
        return None
    bound = inspect.signature(call.module.forward).bind(*call.args, **call.kwargs)
    counter = iter(varying)

    def spec(x):
        dims = next(counter)
        return {d: torch.export.Dim.AUTO for d in sorted(dims)} if dims else None

    # pytree order of (args, kwargs) is the bound arguments' order for a forward of named parameters
    return {name: pytree.tree_map(spec, value) for name, value in bound.arguments.items()}


@contextlib.contextmanager
def _quiet():
    """Export's own chatter (the half-traced graph it prints to stderr on failure, symbolic-shape warnings) says less
    than the error we raise; and stdout is kernelfix's (--json)."""
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logging.disable(logging.NOTSET)


def untraceable(e: Exception, module_path: str) -> Untraceable:
    """An error naming the construct export failed on, and the user's line where it is."""
    text = f"{type(e).__name__}: {e}"
    frame = _user_frame(e)
    location = code = None
    if frame is not None:
        location = f"{shown_path(frame.filename)}:{frame.lineno} in {frame.name}"
        code = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip() or None
    construct, advice = _classify(text, code or "")
    where = f" at {location}" + (f":\n    {code}\n" if code else ".\n") if location else ".\n"
    message = (
        f"cannot capture {module_path}: torch.export cannot trace {construct}{where}"
        f"To capture it: {advice}; or capture a submodule beside or below it."
    )
    return Untraceable(message, construct=construct, location=location, code=code)


def _classify(text: str, code: str) -> tuple[str, str]:
    """(the construct, what to do about it), from the error and the user's line."""
    if any(k in text for k in _DATA_DEPENDENT):
        reads = [r.rstrip("(") + ("()" if r.endswith("(") else "") for r in _READS if r in code]
        if reads:
            return (
                f"a read of a tensor's value into Python ({', '.join(reads)}: data-dependent)",
                "keep the value in a tensor (masks, torch.where), or pass it to the module as a plain int",
            )
        if re.match(r"\s*for\b.*\bin\b", code):
            return (
                "a Python loop over a tensor's values (how many times it runs depends on the data: a loop over the experts "
                "that received tokens, say)",
                "loop over a fixed range (every expert, with a mask for its tokens), or use a grouped operation such as "
                "torch._grouped_mm; for a transformers mixture of experts, set config._experts_implementation = "
                '"grouped_mm"',
            )
        return (
            "a Python decision on a tensor's values (data-dependent control flow)",
            "compute both branches and pick with torch.where, or use torch.cond",
        )
    for keys, what, how in _KNOWN:
        if any(k in text for k in keys):
            return what, how
    if "Unsupported input type" in text:
        kind = re.search(r"<class '([^']+)'>", text)
        name = kind[1] if kind else "an object"
        return (
            f"an argument of type {name} (an object torch.export takes no input of: not a tensor, a number or a "
            "list, tuple or dict of them)",
            f"pass the module tensors (or lists, tuples and dicts of them) in place of the {name.rsplit('.', 1)[-1]}",
        )
    return f"something in it: {_first_sentence(text)}", "rewrite that line"


def _first_sentence(text: str, limit: int = 300) -> str:
    """The error's first sentence, cut at a word (never mid-word) when it is long."""
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    end = line.find(". ")
    line = line[: end + 1] if 0 < end < limit else line
    if len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0] + " ..."


def _user_frame(e: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of the user's code in the traceback: where the construct is."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if is_user_file(f.filename)]
    return frames[-1] if frames else None


def random_ops(ep: torch.export.ExportedProgram) -> list[str]:
    """Operators in the graph that draw random numbers (dropout in training mode, randn, ...)."""
    found = []
    for node in ep.graph.nodes:
        op = node.target
        if (
            node.op != "call_function"
            or not isinstance(op, torch._ops.OpOverload)
            or torch.Tag.nondeterministic_seeded not in op.tags
        ):
            continue
        if not _draws(node):
            continue
        found.append(_where(node, str(op.overloadpacket).replace("aten::", "aten.")))
    return found


def _draws(node) -> bool:
    """Whether a seeded op draws here: dropout with train=False and attention with dropout_p=0 do not."""
    names = [a.name for a in node.target._schema.arguments]

    def arg(name: str):
        i = names.index(name)
        return node.kwargs.get(
            name, node.args[i] if i < len(node.args) else node.target._schema.arguments[i].default_value
        )

    if "train" in names and arg("train") is False:
        return False
    if "dropout_p" in names and arg("dropout_p") in (0, 0.0, None):
        return False
    if (
        "p" in names
        and node.target.overloadpacket in (torch.ops.aten.dropout, torch.ops.aten.native_dropout)
        and arg("p") in (0, 0.0)
    ):
        return False  # dropout with p = 0 keeps every element: nothing random
    return True


def _where(node, what: str) -> str:
    """``what`` and the user's source line it came from, as export recorded it."""
    trace = node.meta.get("stack_trace") or ""
    lines = [line.strip() for line in trace.splitlines() if line.strip().startswith("File ")]
    user = [line for line in lines if is_user_file(line.split('"')[1])] if lines else []
    if not user:
        return what
    loc = user[-1].split('"')
    return f"{what} ({os.path.basename(loc[1])}{loc[2].split(',')[1].replace(' line ', ':')})"
