"""Arguments that carry state from call to call, such as the cache transformers passes every decoder attention.

A transformers ``DynamicCache`` reaches ``LlamaAttention.forward`` as an argument; the attention reads the keys and
values of its layer (``cache.layers[i]``) and writes the new ones there (``cache.update``). torch.export takes no
such object, and a task must say what the call reads and writes. So a call's *state objects* (an argument leaf that
is a plain Python object with attributes, not a tensor, a number or a container) are watched:

- before the call, a :class:`Snapshot` of what each holds (attributes, list items and dict values, a few levels deep);
- after it, the paths that changed (a tensor rebound or written in place, a flag flipped) give the *units* the call
  touched (``layers[0]``: the object holding the changed attributes);
- the task takes each unit's tensors as they were before the call as inputs (``kf_state``: none for an empty cache)
  and returns, beside the module's own output, what the call wrote there; the judge checks both.

:func:`flat_call` turns the recorded call into that form (the state object replaced by a marker, its tensors in the
``kf_state`` keyword, its writes in the output), and :func:`stateful_module` is the module export traces: it builds
the state object again around the inputs, calls the module and reads the writes back. The swap
(:class:`StateBinding`) does the same with the user's own object: it reads the unit's tensors, runs the kernel,
and writes back what the module would have written, so a ``generate()`` with the swap sees the cache it expects.
"""

from __future__ import annotations

import copy
import inspect
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

from kernelfix.capture.schema import StateArg, StateUnit, StateValue

STATE_KEY = "kf_state"  # the keyword the flat call passes a unit's tensors in
STATE_OUT = "kf_state"  # the output dict key holding what the call wrote
MARK = "kernelfix-state:"  # the state object's place in the flat call
MAX_DEPTH = 4
TOP = re.compile(r"args\[(\d+)\]|kwargs\['([^']+)'\]")  # a state argument's place: at the top of the call
ABSENT = object()
_PRIMITIVE = (bool, int, float, str, type(None))


def is_state_object(x: Any) -> bool:
    """A plain Python object with attributes, passed as an argument: possibly state (a cache), never a tensor or value."""
    if isinstance(
        x, (torch.Tensor, nn.Module, type, torch.dtype, torch.device, torch.Generator, *_PRIMITIVE, tuple, list, dict)
    ):
        return False
    if callable(x) and not hasattr(x, "__dict__"):
        return False
    return hasattr(x, "__dict__") and not inspect.isroutine(x) and not inspect.ismodule(x)


# ------------------------------------------------------------------ what an object holds


Path = tuple  # ("layers", 0, "keys"): attribute names (str) and list or dict keys


def show(path: Path) -> str:
    """("layers", 0, "keys") -> "layers[0].keys" """
    out = ""
    for p in path:
        out += (
            f"[{p!r}]" if isinstance(p, str) and not p.isidentifier() else f"[{p}]" if isinstance(p, int) else f".{p}"
        )
    return out.lstrip(".")


def parse(text: str) -> Path:
    """The inverse of :func:`show`, for the paths a manifest records."""
    parts: list[Any] = []
    for m in re.finditer(r"\.?([A-Za-z_]\w*)|\[(-?\d+)\]|\[('(?:[^'\\]|\\.)*')\]", text):
        parts.append(m[1] if m[1] else int(m[2]) if m[2] else eval(m[3]))  # noqa: S307 - a quoted key we wrote ourselves
    return tuple(parts)


@dataclass
class Held:
    """One value at a path: a tensor (by identity and version counter, so a write in place shows) or a primitive."""

    value: Any
    tensor: bool
    ident: int = 0
    version: int = 0

    copy: torch.Tensor | None = None  # an inference tensor has no version counter: its values, to compare

    @classmethod
    def of(cls, v: Any) -> Held:
        if isinstance(v, torch.Tensor):
            if v.is_inference():  # torch.inference_mode(): no version counter to read
                return cls(v, True, id(v), -1, v.detach().clone())
            return cls(v, True, id(v), v._version)
        return cls(v, False)

    def same(self, other: Held) -> bool:
        if self.tensor != other.tensor:
            return False
        if self.tensor:
            if self.ident != other.ident:
                return False
            if self.copy is not None:  # written in place? compare the values themselves
                return self.copy.shape == other.value.shape and bool(torch.equal(self.copy, other.value))
            return self.version == other.version
        return type(self.value) is type(other.value) and self.value == other.value


@dataclass
class Snapshot:
    """What a state object holds: every tensor and primitive value reachable from it, by path."""

    held: dict[Path, Held] = field(default_factory=dict)
    objects: dict[Path, int] = field(default_factory=dict)  # path -> id of the object there (the units' owners)

    @classmethod
    def take(cls, root: Any) -> Snapshot:
        s = cls()
        seen: set[int] = set()

        def walk(obj: Any, path: Path, depth: int) -> None:
            if (
                isinstance(obj, torch.Tensor)
                or isinstance(obj, _PRIMITIVE)
                or isinstance(obj, (torch.device, torch.dtype))
            ):
                s.held[path] = Held.of(obj)
                return
            if depth > MAX_DEPTH or id(obj) in seen or isinstance(obj, (nn.Module, type)) or inspect.isroutine(obj):
                return
            seen.add(id(obj))
            if isinstance(obj, (list, tuple)):
                s.objects[path] = id(obj)
                for i, v in enumerate(obj):
                    walk(v, (*path, i), depth + 1)
            elif isinstance(obj, dict):
                s.objects[path] = id(obj)
                for k, v in obj.items():
                    if isinstance(k, (str, int)):
                        walk(v, (*path, k), depth + 1)
            elif hasattr(obj, "__dict__"):
                s.objects[path] = id(obj)
                for k, v in vars(obj).items():
                    walk(v, (*path, k), depth + 1)

        walk(root, (), 0)
        return s

    def changed(self, after: Snapshot) -> list[Path]:
        """Paths whose value differs after the call, appeared or disappeared."""
        keys = set(self.held) | set(after.held)
        return sorted(
            (p for p in keys if p not in self.held or p not in after.held or not self.held[p].same(after.held[p])),
            key=repr,
        )


def resolve(root: Any, path: Path) -> Any:
    obj = root
    for p in path:
        obj = obj[p] if isinstance(obj, (list, tuple, dict)) else getattr(obj, p)
    return obj


# ------------------------------------------------------------------ what a call touched


def describe_value(v: Any) -> StateValue:
    if isinstance(v, torch.device):
        return StateValue(kind="device")  # where the call's tensors are, on any machine
    if isinstance(v, torch.dtype):
        return StateValue(kind="dtype", value=str(v).removeprefix("torch."))
    if v is ABSENT:
        return StateValue(kind="absent")
    if isinstance(v, _PRIMITIVE):
        return StateValue(kind="value", value=v)
    raise TypeError(type(v).__name__)


def value_of(s: StateValue, device: torch.device) -> Any:
    if s.kind == "device":
        return device
    if s.kind == "dtype":
        return getattr(torch, str(s.value))
    return ABSENT if s.kind == "absent" else s.value


def matches(s: StateValue, v: Any) -> bool:
    if s.kind == "device":
        return isinstance(v, torch.device)
    if s.kind == "dtype":
        return isinstance(v, torch.dtype) and str(v).removeprefix("torch.") == s.value
    if s.kind == "absent":
        return v is ABSENT
    return type(v) is type(s.value) and v == s.value


def units_of(before: Snapshot, after: Snapshot, module: nn.Module, leaf: str, type_name: str) -> StateArg | None:
    """The units (objects holding what changed) and what each read and wrote; None when the call changed nothing."""
    changed = before.changed(after)
    if not changed:
        return None
    owners = sorted({p[:-1] for p in changed}, key=repr)
    units = []
    for owner in owners:
        attrs = sorted({p[-1] for p in [*before.held, *after.held] if p[:-1] == owner and isinstance(p[-1], str)})
        inputs = [a for a in attrs if (h := before.held.get((*owner, a))) is not None and h.tensor]
        outputs = [
            a for a in attrs if (*owner, a) in changed and (h := after.held.get((*owner, a))) is not None and h.tensor
        ]
        prims_before = {
            a: describe_value(before.held[(*owner, a)].value if (*owner, a) in before.held else ABSENT)
            for a in attrs
            if a not in inputs
        }
        prims_after = {
            a: describe_value(after.held[(*owner, a)].value if (*owner, a) in after.held else ABSENT)
            for a in attrs
            if not _is_tensor_after(after, owner, a) and (*owner, a) in changed
        }
        for a in attrs:  # a tensor the call dropped (set to None, or deleted)
            if (*owner, a) in changed and a in inputs and not _is_tensor_after(after, owner, a):
                prims_after[a] = describe_value(after.held[(*owner, a)].value if (*owner, a) in after.held else ABSENT)
        units.append(
            StateUnit(
                path=show(owner),
                index_attr=_index_attr(module, owner),
                inputs=inputs,
                outputs=outputs,
                before=prims_before,
                after=prims_after,
            )
        )
    return StateArg(leaf=leaf, type=type_name, units=units)


def _is_tensor_after(after: Snapshot, owner: Path, a: str) -> bool:
    h = after.held.get((*owner, a))
    return h is not None and h.tensor


def _index_attr(module: nn.Module, owner: Path) -> str | None:
    """The module's attribute that names the unit's index (``layer_idx`` for ``layers[3]``), so that another instance
    of the same class can be pointed at its own unit; None when the path has no index or no attribute matches."""
    ints = [p for p in owner if isinstance(p, int)]
    if len(ints) != 1:
        return None
    names = [k for k, v in vars(module).items() if type(v) is int and v == ints[0] and not k.startswith("_")]
    if not names:  # a decoder layer's attention holds it: self_attn.layer_idx
        names = [
            f"{sub}.{k}"
            for sub, m in module.named_modules()
            if sub and sub.count(".") < 2
            for k, v in vars(m).items()
            if type(v) is int and v == ints[0] and "idx" in k or (k == "layer_id" and v == ints[0])
        ]
    names.sort(key=lambda k: (k.count("."), 0 if "layer" in k else 1 if "idx" in k or "index" in k else 2, k))
    return names[0] if names else None


def unit_path(unit: StateUnit, module: nn.Module | None) -> Path:
    """The unit's path for this instance of the module: its own index where the unit is indexed by ``index_attr``."""
    path = parse(unit.path)
    if unit.index_attr is None or module is None:
        return path
    own: Any = module
    for part in unit.index_attr.split("."):
        own = getattr(own, part, None)
    if type(own) is not int:
        return path
    return tuple(own if isinstance(p, int) else p for p in path)


def key(leaf: str, unit: StateUnit, attr: str) -> str:
    """The name of one state tensor in ``kf_state`` (and in the task's inputs): cache_layers_0_keys."""
    name = re.sub(r"\W+", "_", f"{_leaf_name(leaf)}_{unit.path}_{attr}").strip("_")
    return re.sub(r"_+", "_", name)


def _leaf_name(leaf: str) -> str:
    m = re.findall(r"\['([^']+)'\]|\[(\d+)\]", leaf)
    return "_".join(a or b for a, b in m) or "state"


# ------------------------------------------------------------------ the flat call and the module export traces


@dataclass
class Recorded:
    """A state object of one call: where it is among the call's leaves, and what it held before and after."""

    index: int  # its place among pytree.tree_leaves((args, kwargs))
    leaf: str  # "kwargs['cache']"
    obj: Any
    before: Snapshot
    before_values: dict[Path, Any]  # the tensors (cloned) and primitives before the call
    spec: StateArg | None = None  # filled after the call (None: it changed nothing)
    written: dict[Path, torch.Tensor] = field(
        default_factory=dict
    )  # what the call wrote, copied at once (the script goes on)


def record_before(args: tuple, kwargs: dict) -> list[Recorded]:
    """Every state object among the call's arguments, with what it held before the call (tensors cloned)."""
    from kernelfix.capture.tensors import clone_like

    flat = pytree.tree_flatten_with_path((tuple(args), dict(kwargs)))[0]
    out = []
    for i, (path, x) in enumerate(flat):
        if is_state_object(x):
            snap = Snapshot.take(x)
            values = {p: clone_like(h.value) if h.tensor else h.value for p, h in snap.held.items()}
            out.append(
                Recorded(index=i, leaf=_call_path(pytree.keystr(path)), obj=x, before=snap, before_values=values)
            )
    return out


def record_after(recorded: list[Recorded], module: nn.Module) -> None:
    from kernelfix.capture.tensors import clone_like

    for r in recorded:
        r.spec = units_of(
            r.before, Snapshot.take(r.obj), module, r.leaf, f"{type(r.obj).__module__}.{type(r.obj).__qualname__}"
        )
        for unit in r.spec.units if r.spec is not None else []:
            owner = parse(unit.path)
            for a in unit.outputs:
                r.written[(*owner, a)] = clone_like(resolve(r.obj, (*owner, a)))


def _call_path(keystr: str) -> str:
    m = re.match(r"\[(0|1)\](.*)", keystr)
    return ("args" if m[1] == "0" else "kwargs") + m[2] if m else keystr


def flat_call(args: tuple, kwargs: dict, output: Any, recorded: list[Recorded]) -> tuple[tuple, dict, Any]:
    """The call as the task takes it: each state object replaced by a marker, the tensors its units held before the
    call in ``kf_state``, and what the call wrote there beside the module's output: ``(output, {key: tensor})``."""

    touched = [r for r in recorded if r.spec is not None]
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    for r in touched:
        flat[r.index] = MARK + r.spec.type.rsplit(".", 1)[-1]
    fargs, fkwargs = pytree.tree_unflatten(flat, spec)
    state_in: dict[str, torch.Tensor] = {}
    state_out: dict[str, torch.Tensor] = {}
    for r in touched:
        for unit in r.spec.units:
            owner = parse(unit.path)
            for a in unit.inputs:
                state_in[key(r.leaf, unit, a)] = r.before_values[(*owner, a)]
            for a in unit.outputs:
                state_out[key(r.leaf, unit, a)] = r.written[(*owner, a)]
    fkwargs = dict(fkwargs)
    if state_in:
        fkwargs[STATE_KEY] = state_in
    return tuple(fargs), fkwargs, (output, {STATE_OUT: state_out}) if touched else output


def state_call(forward: Any, recorded: list[Recorded], args: tuple, kwargs: dict) -> Any:
    """``forward`` on the flat call: each state object built as it was before the call around the ``kf_state``
    tensors, and the output returned with what the call wrote (what torch.export traces)."""
    touched = [r for r in recorded if r.spec is not None]
    if not touched:
        return forward(*args, **kwargs)
    state_in = kwargs.pop(STATE_KEY, None) or {}
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    objs = []
    for r in touched:
        obj, units = rebuilt(r, state_in)
        flat[r.index] = obj
        objs.append((r, units))
    a, k = pytree.tree_unflatten(flat, spec)
    out = forward(*a, **k)
    written = {
        key(r.leaf, u, attr): getattr(unit_obj, attr)
        for r, units in objs
        for u, unit_obj in units
        for attr in u.outputs
    }
    return (out, {STATE_OUT: written})


def rebuilt(r: Recorded, state_in: dict[str, torch.Tensor]) -> tuple[Any, list[tuple[StateUnit, Any]]]:
    """A copy of the recorded state object as it was before the call: the objects on the way to each unit copied
    (the user's own object is never changed), each unit's tensors from ``state_in``, its values as before."""
    root = copy.copy(r.obj)
    units = []
    for unit in r.spec.units:
        path = parse(unit.path)
        obj = root
        for i, p in enumerate(path):
            child = obj[p] if isinstance(obj, (list, tuple, dict)) else getattr(obj, p)
            child = (
                list(child) if isinstance(child, list) else dict(child) if isinstance(child, dict) else copy.copy(child)
            )
            if isinstance(obj, (list, dict)):
                obj[p] = child
            else:
                setattr(obj, p, child)
            obj = child
        for a in unit.inputs:
            setattr(obj, a, state_in[key(r.leaf, unit, a)])
        for a, v in unit.before.items():
            val = r.before_values.get((*path, a), ABSENT)
            if val is ABSENT:
                if a in vars(obj):
                    delattr(obj, a)
            else:
                setattr(obj, a, val)
        units.append((unit, obj))
    return root, units
