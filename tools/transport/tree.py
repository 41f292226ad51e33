"""[any] Nested inputs and outputs as a JSON skeleton plus a list of tensors.

A task's ``get_inputs()`` and a forward's result may nest tensors in lists,
tuples and dicts beside plain values (ints, floats, dtypes). ``flatten`` turns
one into a skeleton (JSON: what the request socket and the message pipe carry)
and its tensors; each tensor travels as a :class:`TensorSpec` and the bytes it
spans in an arena. Views keep their strides: the span from the first element
the view reaches to the last is copied, and rebuilt with ``as_strided``, so a
transposed or expanded input reaches the candidate as the task made it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from kernelfix.tools.transport.arena import Arena, aligned

Skeleton = Any  # JSON


class UnsupportedValue(TypeError):
    """A value that cannot cross between processes (an object that is no tensor, number, string, dtype or container)."""


class TensorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dtype: str
    shape: list[int]
    stride: list[int]
    span: int  # elements from the first the view reaches to the last, plus one (0 when empty)
    offset: int = 0  # where its bytes start in the arena

    @property
    def itemsize(self) -> int:
        import torch

        return torch.empty((), dtype=torch_dtype(self.dtype)).element_size()

    @property
    def nbytes(self) -> int:
        return self.span * self.itemsize

    def describe(self) -> str:
        return f"Tensor{tuple(self.shape)} {self.dtype}"


def torch_dtype(name: str):
    import torch

    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise UnsupportedValue(f"unknown dtype {name!r}")
    return dt


def dtype_name(dt) -> str:
    return str(dt).removeprefix("torch.")


def _span(t) -> int:
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))


def spec_of(t) -> TensorSpec:
    return TensorSpec(dtype=dtype_name(t.dtype), shape=list(t.shape), stride=list(t.stride()), span=_span(t))


def contiguous_spec(t) -> TensorSpec:
    """How ``t`` is carried when only its values matter (outputs): dense, row-major."""
    strides, acc = [], 1
    for n in reversed(list(t.shape)):
        strides.append(acc)
        acc *= max(n, 1)
    return TensorSpec(dtype=dtype_name(t.dtype), shape=list(t.shape), stride=list(reversed(strides)), span=t.numel())


def flatten(obj: Any) -> tuple[Skeleton, list[Any]]:
    leaves: list[Any] = []
    return _walk(obj, leaves), leaves


def _walk(o: Any, leaves: list[Any]) -> Skeleton:
    # A module-level function, not a closure: a recursive closure over ``leaves`` is a reference
    # cycle, and it kept every forward's outputs alive until Python's cyclic GC came round.
    import torch

    if isinstance(o, torch.Tensor):
        leaves.append(o)
        return {"t": len(leaves) - 1}
    if isinstance(o, bool) or o is None or isinstance(o, (int, float, str)):
        return {"v": o}
    if isinstance(o, list):
        return {"l": [_walk(x, leaves) for x in o]}
    if isinstance(o, tuple):
        return {"u": [_walk(x, leaves) for x in o]}
    if isinstance(o, dict):
        if not all(isinstance(k, (str, int, float, bool)) or k is None for k in o):
            raise UnsupportedValue("a dict with keys that are not numbers or strings")
        return {"d": [[k, _walk(v, leaves)] for k, v in o.items()]}
    if isinstance(o, torch.dtype):
        return {"dtype": dtype_name(o)}
    if isinstance(o, torch.device):
        return {"device": str(o)}
    if isinstance(o, torch.Size):
        return {"size": list(o)}
    raise UnsupportedValue(f"a value of type {type(o).__module__}.{type(o).__qualname__}")


def unflatten(skel: Skeleton, leaves: list[Any]) -> Any:
    import torch

    if not isinstance(skel, dict) or len(skel) != 1:
        raise UnsupportedValue(f"malformed skeleton {str(skel)[:80]}")
    ((kind, val),) = skel.items()
    if kind == "t":
        return leaves[val]
    if kind == "v":
        return val
    if kind == "l":
        return [unflatten(x, leaves) for x in val]
    if kind == "u":
        return tuple(unflatten(x, leaves) for x in val)
    if kind == "d":
        return {k: unflatten(v, leaves) for k, v in val}
    if kind == "dtype":
        return torch_dtype(val)
    if kind == "device":
        return torch.device(val)
    if kind == "size":
        return torch.Size(val)
    raise UnsupportedValue(f"malformed skeleton {str(skel)[:80]}")


def layout(specs: list[TensorSpec], start: int = 0) -> int:
    """Give each spec an aligned offset, packed from ``start``; returns the bytes needed."""
    pos = start
    for s in specs:
        s.offset = pos
        pos = aligned(pos + s.nbytes)
    return pos


def write(arena: Arena, spec: TensorSpec, t) -> None:
    """``t``'s span into the arena, as ``spec`` lays it out (same shape, strides and dtype)."""
    import torch

    if spec.span == 0:
        return
    src = torch.as_strided(t.detach(), (spec.span,), (1,), t.storage_offset())
    dst = arena.view(spec.offset, spec.nbytes).view(src.dtype)
    with torch.no_grad():
        dst.copy_(src)


def write_values(arena: Arena, spec: TensorSpec, t) -> None:
    """``t``'s values, dense and row-major, into ``spec``'s place (an output's layout)."""
    import torch

    if spec.span == 0:
        return
    dst = arena.view(spec.offset, spec.nbytes).view(torch_dtype(spec.dtype)).view(spec.shape)
    with torch.no_grad():
        dst.copy_(t.detach())


def read(arena: Arena, spec: TensorSpec):
    """The tensor ``spec`` describes, viewing the arena's bytes in place (no copy)."""
    import torch

    dt = torch_dtype(spec.dtype)
    if spec.span == 0:
        return torch.empty(spec.shape, dtype=dt, device=arena.device)
    flat = arena.view(spec.offset, spec.nbytes).view(dt)
    return torch.as_strided(flat, spec.shape, spec.stride, flat.storage_offset())  # offsets count from the storage
