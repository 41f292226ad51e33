"""Is a call to the swapped module one the kernel was judged on? Decided once per kind of call.

A call's *key* is its structure (tuples, lists, dicts and their keys), each tensor's dtype and
shape, and the repr of every other value: exactly what :func:`match_call` compares, so the key
decides the match and its answer can be kept. :class:`CallPlans` keeps one answer per key (the
kernel's tensors in the captured order, or why the call is unlike every captured one), so the full
check runs once per new kind of call and every later call costs a walk over its arguments and a
dict lookup. Calls whose arguments hold other objects (a namedtuple, a registered pytree node, an
unhashable value) have no key and take the full check every time, as before.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import Tensor

from kernelfix.capture.errors import CallMismatch
from kernelfix.capture.schema import InputLeaf
from kernelfix.capture.tensors import dtype_name

# Values that pytree treats as leaves and whose repr is cheap and says what export fixed.
_SCALARS = frozenset(
    {int, float, bool, str, complex, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format}
)
MAX_PLANS = 256  # kinds of call kept; beyond that a call is checked in full (a script calling with ever-new values)


class _NoKey(Exception):
    pass


def _node(x: Any, tensors: list[torch.Tensor]) -> Any:
    if isinstance(x, torch.Tensor):
        tensors.append(x)
        return (x.dtype, x.shape)
    t = type(x)
    if t in _SCALARS:
        return repr(x)
    if t is tuple:
        return (tuple, *[_node(v, tensors) for v in x])
    if t is list:
        return (list, *[_node(v, tensors) for v in x])
    if t is dict:
        return (dict, *[(k, _node(v, tensors)) for k, v in x.items()])
    raise _NoKey


def call_key(args: tuple, kwargs: dict) -> tuple[tuple, list[torch.Tensor]] | None:
    """The call's key and its tensors in pytree order (that of ``(args, kwargs)``), or None when it has no key."""
    tensors: list[torch.Tensor] = []
    try:
        positional = tuple([_node(x, tensors) for x in args])
        keywords = tuple([(k, _node(v, tensors)) for k, v in kwargs.items()]) if kwargs else ()
    except _NoKey:
        return None
    return (positional, keywords), tensors


@dataclass(frozen=True)
class CallPlan:
    """What to do with one kind of call: run the kernel on the call's tensors, or fall back."""

    keywords: tuple[str, ...] | None = None  # the captured keywords' order, when the call passes them in another
    mismatch: str | None = None  # why it is not a captured call (then the original module runs it, or it raises)


class CallPlans:
    """The answer for each kind of call seen, computed by :meth:`match` the first time."""

    def __init__(self, in_spec: pytree.TreeSpec | None, sets: list[list[InputLeaf]]):
        self.in_spec = in_spec
        self.sets = sets
        self.plans: dict[tuple, CallPlan] = {}
        self.full_checks = 0  # calls that took the full check (tests and benchmarks read it)

    def plan(self, args: tuple, kwargs: dict) -> tuple[CallPlan, list[torch.Tensor]]:
        """The plan for this call and the kernel's tensors (empty on a mismatch)."""
        keyed = call_key(args, kwargs)
        if keyed is None:
            return self._full(args, kwargs)
        key, tensors = keyed
        plan = self.plans.get(key)
        if plan is None:
            plan, matched = self._full(args, kwargs)
            if plan.mismatch is None:
                reordered = plan.keywords is not None
                if reordered:
                    tensors = call_key(args, {k: kwargs[k] for k in plan.keywords})[1]
                if len(matched) != len(tensors) or any(a is not b for a, b in zip(matched, tensors)):
                    return plan, matched  # the key's walk and pytree's disagree: never kept (not expected)
            if len(self.plans) < MAX_PLANS:
                self.plans[key] = plan
            return plan, matched
        if plan.mismatch is not None:
            return plan, []
        if plan.keywords is not None:
            return plan, call_key(args, {k: kwargs[k] for k in plan.keywords})[1]
        return plan, tensors

    def _full(self, args: tuple, kwargs: dict) -> tuple[CallPlan, list[torch.Tensor]]:
        self.full_checks += 1
        try:
            matched = self.match(args, kwargs)
        except CallMismatch as e:
            return CallPlan(mismatch=str(e)), []
        keys = captured_keywords(self.in_spec)
        reordered = bool(kwargs) and keys is not None and list(kwargs) != keys
        return CallPlan(keywords=tuple(keys) if reordered else None), matched

    def match(self, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The kernel's tensors from a call; CallMismatch, naming the difference, when it is unlike every captured one."""
        if self.in_spec is None:
            raise CallMismatch("the capture could not record the call's structure")
        errors = []
        for leaves in self.sets:
            try:
                return match_call(self.in_spec, leaves, args, kwargs)
            except CallMismatch as e:
                errors.append(str(e))
        raise CallMismatch(
            errors[0]
            if len(errors) == 1
            else "; ".join(f"captured call {k}: {e}" for k, e in enumerate(errors, start=1))
        )


def match_call(in_spec: pytree.TreeSpec, leaves: list[InputLeaf], args: tuple, kwargs: dict) -> list[torch.Tensor]:
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    if spec != in_spec:
        keys = captured_keywords(in_spec)
        if keys is not None and set(keys) == set(kwargs):  # the same keywords, in another order
            flat, spec = pytree.tree_flatten((tuple(args), {k: kwargs[k] for k in keys}))
    if spec != in_spec:
        raise CallMismatch(
            f"called with {call_shape(args, kwargs)}; the kernel was judged on calls like {leaves_shape(leaves)}"
        )
    tensors = []
    for leaf, value in zip(leaves, flat):
        if leaf.tensor is None:
            if repr(value) != leaf.constant:
                raise CallMismatch(f"{leaf.path} is {value!r}; the capture fixed it to {leaf.constant}")
            continue
        if not isinstance(value, torch.Tensor):
            raise CallMismatch(f"{leaf.path} is a {type(value).__name__}, not a tensor")
        got = f"{dtype_name(value.dtype)}[{', '.join(map(str, value.shape))}]"
        want = f"{leaf.tensor.dtype}[{', '.join(map(str, leaf.tensor.shape))}]"
        if got != want:
            raise CallMismatch(f"{leaf.path} is {got}; the kernel was judged on {want}")
        tensors.append(value)
    return tensors


def compiled_signature(in_spec: pytree.TreeSpec, leaves: list[InputLeaf]) -> tuple:
    """A captured call as ``(args, keywords)``: a tuple of the positional arguments' tagged tuples and one of
    ``(keyword, tagged)`` pairs, each tagged tuple ``("tensor", dtype, shape)``, ``("const", value)``,
    ``("tuple"|"list", *children)``, ``("dict", ((key, child), ...))`` or ``("none",)``, for
    :func:`compiled_call_tensors`: plain constants, which Dynamo guards with one equality check."""
    tagged = []
    for leaf in leaves:
        if leaf.tensor is not None:
            tagged.append(("tensor", getattr(torch, leaf.tensor.dtype), tuple(leaf.tensor.shape)))
            continue
        tagged.append(_constant(leaf.constant or "None"))
    args, kwargs = pytree.tree_unflatten(list(range(len(tagged))), in_spec)  # the capture's (args, kwargs)
    return tuple(_tag(a, tagged) for a in args), tuple((k, _tag(v, tagged)) for k, v in kwargs.items())


def _constant(text: str) -> tuple:
    """A fixed value from its repr: a literal, or a dtype (``torch.float16``); else nothing matches it, and such
    calls fall back under torch.compile (eager, the check compares reprs)."""
    try:
        return ("const", ast.literal_eval(text))
    except (ValueError, SyntaxError):
        pass
    value = getattr(torch, text.removeprefix("torch."), None) if text.startswith("torch.") else None
    return ("const", value) if isinstance(value, torch.dtype) else ("never",)


def _tag(node: Any, leaves: list[tuple]) -> tuple:
    t = type(node)
    if t is int:  # a leaf's place
        return leaves[node]
    if node is None:
        return ("none",)
    if t is tuple or t is list:
        return (t.__name__, *[_tag(c, leaves) for c in node])
    if t is dict:
        return ("dict", tuple((k, _tag(v, leaves)) for k, v in node.items()))
    return ("never",)  # a namedtuple or another registered node: compiled calls with it fall back


def compiled_call_tensors(signatures: tuple[tuple, ...], args: tuple, kwargs: dict) -> list[Tensor] | None:
    """The kernel's tensors when ``(args, kwargs)`` is one of the captured calls ``signatures`` describe
    (:func:`compiled_signature`), in the captured order (keywords in any order); None for any other call."""
    for positional, keywords in signatures:
        if len(args) != len(positional) or len(kwargs) != len(keywords):
            continue
        tensors: list[Tensor] = []
        for value, sig in zip(args, positional):
            if not compiled_match(value, sig, tensors):
                break
        else:
            for key, sig in keywords:
                if key not in kwargs or not compiled_match(kwargs[key], sig, tensors):
                    break
            else:
                return tensors
    return None


def compiled_match(value: Any, sig: tuple, tensors: list[Tensor]) -> bool:
    """Whether ``value`` is the captured argument ``sig`` describes, appending its tensors in the captured order.

    Written for Dynamo to trace, and to cost a compiled call as few guards as can be: what it compares
    (types, lengths, a tensor's dtype and sizes) Dynamo knows while tracing and guards already (the call's
    structure is the caller's code; a tensor's dtype and shape are in its TENSOR_MATCH), so the guards it
    adds are only on what it reads: the signatures (one equality guard on them), this function and the
    builtins it calls. Dtypes compare by identity and sizes one by one as ints, which Dynamo folds itself
    (comparing tuples or dtypes with ``!=`` goes through its polyfills, each a guard of its own), and
    ``Tensor`` is this module's name (through ``torch`` it would give the torch module a second source
    beside the kernel's: an object-aliasing guard, evaluated in Python on every call)."""
    kind = sig[0]
    if kind == "tensor":
        if not isinstance(value, Tensor) or value.dtype is not sig[1] or len(value.shape) != len(sig[2]):
            return False
        for got, want in zip(value.shape, sig[2]):
            if got != want:
                return False
        tensors.append(value)
        return True
    if kind == "const":
        return not isinstance(value, Tensor) and type(value) is type(sig[1]) and (value is sig[1] or value == sig[1])
    if kind == "none":
        return value is None
    if kind == "tuple" or kind == "list":
        if type(value) is not (tuple if kind == "tuple" else list) or len(value) != len(sig) - 1:
            return False
        for v, sub in zip(value, sig[1:]):
            if not compiled_match(v, sub, tensors):
                return False
        return True
    if kind == "dict":
        if type(value) is not dict or len(value) != len(sig[1]):
            return False
        for k, sub in sig[1]:
            if k not in value or not compiled_match(value[k], sub, tensors):
                return False
        return True
    return False


def output_layout(out_spec: pytree.TreeSpec, returned: list[int] | None = None) -> Any:
    """The output's structure with each leaf's index in its place, for :func:`rebuild` (no pytree under Dynamo).
    ``returned``: the leaves a custom operator returns, in order (the others are None in every call's output)."""
    where = {leaf: k for k, leaf in enumerate(range(out_spec.num_leaves) if returned is None else returned)}
    return _layout(pytree.tree_unflatten([where.get(i) for i in range(out_spec.num_leaves)], out_spec))


def _layout(node: Any) -> Any:
    t = type(node)
    if t is int or node is None:
        return node
    if t is tuple or t is list:
        return t(_layout(c) for c in node)
    if t is dict:
        return {k: _layout(v) for k, v in node.items()}
    raise ValueError(f"an output of type {t.__name__}")


def rebuild(layout: Any, leaves: list) -> Any:
    if type(layout) is int:
        return leaves[layout]
    if layout is None:
        return None
    if type(layout) is dict:
        return {k: rebuild(v, leaves) for k, v in layout.items()}
    return type(layout)(rebuild(c, leaves) for c in layout)


def captured_keywords(in_spec: pytree.TreeSpec) -> list[str] | None:
    children = in_spec.children() if hasattr(in_spec, "children") else in_spec.children_specs
    return list(children[1].context) if len(children) == 2 and children[1].type is dict else None


def call_shape(args: tuple, kwargs: dict) -> str:
    def one(x: Any) -> str:
        return f"{dtype_name(x.dtype)}[{', '.join(map(str, x.shape))}]" if isinstance(x, torch.Tensor) else repr(x)

    parts = [one(a) if not isinstance(a, (list, tuple, dict)) else str(pytree.tree_map(one, a)) for a in args]
    parts += [
        f"{k}={one(v) if not isinstance(v, (list, tuple, dict)) else pytree.tree_map(one, v)}"
        for k, v in kwargs.items()
    ]
    return f"({', '.join(parts)})"


def leaves_shape(leaves: list[InputLeaf]) -> str:
    return (
        "("
        + ", ".join(
            f"{leaf.path}={leaf.tensor.describe().split(' in ')[0] if leaf.tensor else leaf.constant}"
            for leaf in leaves
        )
        + ")"
    )
