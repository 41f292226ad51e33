"""Varied inputs: the task's own inputs rescaled, shifted negative, or redrawn heavy-tailed.

A kernel can pass every trial drawn from get_inputs() without computing the
function: a loss returned as its expected value under randn, a normalisation
with rand's mean and variance hard-coded. On these variants it cannot. Only
floating-point tensors change; integer tensors (indices, labels), booleans and
non-tensors stay as they are. The reference child applies them (the judge keeps
a variant only where the reference stays finite on it).
"""

from __future__ import annotations

from typing import Any

import torch

from kernelfix.tools.verdict import InputVariant

SCALE = 10.0
SHIFT_STDS = 2.0
STUDENT_T_DOF = 3

DESCRIPTIONS: dict[InputVariant, str] = {
    "scaled": f"scaled x{SCALE:g}",
    "shifted": f"shifted negative by |mean| + {SHIFT_STDS:g} std",
    "heavy_tailed": f"redrawn heavy-tailed (mean + std * Student-t, {STUDENT_T_DOF} dof)",
}


def describe(variant: InputVariant, base_trial: int) -> str:
    return f"trial {base_trial}'s inputs {DESCRIPTIONS[variant]}"


def _student_t(shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
    z = torch.randn(shape, generator=gen, dtype=torch.float64)
    chi2 = torch.randn((STUDENT_T_DOF, *shape), generator=gen, dtype=torch.float64).pow(2).sum(0)
    return z / (chi2 / STUDENT_T_DOF).sqrt()


def _vary(x: torch.Tensor, variant: InputVariant, gen: torch.Generator) -> torch.Tensor:
    x64 = x.detach().to(torch.float64)
    mean = x64.mean() if x.numel() else x64.new_zeros(())
    std = x64.std(unbiased=False) if x.numel() > 1 else x64.new_zeros(())
    if variant == "scaled":
        y = x64 * SCALE
    elif variant == "shifted":
        y = x64 - (mean.abs() + SHIFT_STDS * std)
    else:
        y = mean + std * _student_t(x.shape, gen)
    out = torch.empty_like(x)  # same dtype, device and layout as the task's own
    out.copy_(y)
    return out


def apply(inputs: list[Any], variant: InputVariant, seed: int) -> tuple[list[Any], bool]:
    """The variant of ``inputs`` and whether any tensor changed (False: nothing floating-point to vary)."""
    gen = torch.Generator().manual_seed(seed)
    changed = False

    def walk(obj: Any) -> Any:
        nonlocal changed
        if isinstance(obj, torch.Tensor) and obj.is_floating_point() and obj.numel():
            changed = True
            return _vary(obj, variant, gen)
        if isinstance(obj, (list, tuple)):
            return type(obj)(walk(o) for o in obj)
        if isinstance(obj, dict):
            return {k: walk(v) for k, v in obj.items()}
        return obj

    return [walk(x) for x in inputs], changed
