"""Library code export cannot trace as it runs, and the torch operators that compute the same thing.

transformers' mixture-of-experts modules run their experts through an interchangeable implementation
(``config._experts_implementation``): ``eager`` loops over the experts that received tokens (a Python decision
on the routing's values, which torch.export refuses), ``grouped_mm`` sorts the tokens by expert and runs one grouped
GEMM per projection. While tracing, transformers' ``grouped_mm`` calls its own custom operator
``transformers::grouped_mm_fallback`` where torch's grouped GEMM does not apply (a float32 model), and a task holds
only torch's own operators. So a capture traces the experts with the ``grouped_mm`` implementation (the same math as
the loop) and writes torch's ``aten._grouped_mm`` in place of the custom operator: the task's reference is torch's own
grouped GEMM, which runs on the CPU and the GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn as nn

# custom operator -> (the torch operator that computes it, a map of its (args, kwargs) onto the torch operator's)
Mapper = Callable[[tuple, dict], tuple[tuple, dict]]


def _grouped_mm_args(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    x, w = args[0], args[1]
    offs = args[2] if len(args) > 2 else kwargs["offs"]
    return (x, w), {"offs": offs}


def references() -> dict[str, tuple[Any, Mapper]]:
    out: dict[str, tuple[Any, Mapper]] = {}
    if hasattr(torch.ops.aten, "_grouped_mm"):
        out["transformers::grouped_mm_fallback"] = (torch.ops.aten._grouped_mm.default, _grouped_mm_args)
    return out


def reference_for(qualname: str) -> tuple[Any, Mapper] | None:
    """The torch operator a known library custom operator (``namespace::name``) is written as in a task."""
    return references().get(qualname)


@contextlib.contextmanager
def traceable_experts(module: nn.Module, notes: list[str]) -> Iterator[None]:
    """While tracing: mixture-of-experts modules of ``module`` whose experts loop in Python (transformers' ``eager``
    implementation) run the ``grouped_mm`` implementation instead, which export can trace."""
    changed: list[tuple[Any, str]] = []
    for m in module.modules():
        config = getattr(m, "config", None)
        impl = getattr(config, "_experts_implementation", None)
        if impl == "eager" and _has_grouped_mm(m):
            if all(c is not config for c, _ in changed):
                changed.append((config, impl))
    for config, _ in changed:
        config._experts_implementation = "grouped_mm"
    if changed:
        notes.append(
            "the experts' loop over experts (transformers' eager implementation) was traced as its grouped_mm "
            "implementation: the same sums, each expert's tokens in one grouped GEMM"
        )
    try:
        yield
    finally:
        for config, impl in changed:
            config._experts_implementation = impl


def _has_grouped_mm(m: nn.Module) -> bool:
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
    except Exception:  # transformers absent or older: nothing to switch
        return False
    forward = type(m).forward
    return (
        "grouped_mm" in ALL_EXPERTS_FUNCTIONS
        and getattr(forward, "__wrapped__", None) is not None
        and hasattr(m, "has_gate")
    )
