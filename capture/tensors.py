"""What capture records of a tensor (layout and value range, never values), and copies that keep its layout."""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from kernelfix.capture.schema import TensorSpec


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def describe(t: torch.Tensor) -> TensorSpec:
    """Shape, strides, dtype and the range of the values a fresh draw should cover."""
    spec = TensorSpec(
        shape=list(t.shape),
        stride=list(t.stride()),
        dtype=dtype_name(t.dtype),
        device=str(t.device),
        kind=_kind(t.dtype),
    )
    if t.numel() == 0:
        return spec
    x = t.detach()
    if spec.kind == "bool":
        spec.p_true = float(x.float().mean())
    elif spec.kind == "int":
        spec.min, spec.max = float(x.min()), float(x.max())
    elif spec.kind == "float":
        x = x.double()
        finite = torch.isfinite(x)
        spec.nonfinite = int((~finite).sum())
        vals = x[finite]
        if vals.numel():
            spec.min, spec.max, spec.mean = float(vals.min()), float(vals.max()), float(vals.mean())
            spec.std = float(vals.std(unbiased=False))
    return spec


def _kind(dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "bool"
    if dtype.is_complex:
        return "complex"
    return "float" if dtype.is_floating_point else "int"


def extent(shape: list[int] | torch.Size, stride: list[int] | tuple[int, ...]) -> int:
    """Elements of storage a tensor of this shape and these strides spans from its offset."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((s - 1) * st for s, st in zip(shape, stride))


def clone_like(t: torch.Tensor) -> torch.Tensor:
    """A detached copy with the same shape, strides and overlap (a broadcast input stays broadcast)."""
    t = t.detach()
    n = extent(t.shape, t.stride())
    flat = torch.as_strided(t, (n,), (1,)).clone()  # the span of storage the tensor reads, from its offset
    return flat.as_strided(t.shape, t.stride())


def detach_tree(obj):
    """A copy of a call's arguments or outputs: tensors cloned (layout kept), everything else as is."""
    return pytree.tree_map(lambda x: clone_like(x) if isinstance(x, torch.Tensor) else x, obj)
