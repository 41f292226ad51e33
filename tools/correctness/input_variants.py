"""[judge, reference worker, one-shot child] Varied inputs: the task's own inputs rescaled, shifted negative, or redrawn heavy-tailed.

A kernel can pass every trial drawn from get_inputs() without computing the
function: a loss returned as its expected value under randn, a normalisation
with rand's mean and variance hard-coded. On these variants it cannot. Only
floating-point tensors change; integer tensors (indices, labels), booleans and
non-tensors stay as they are. The reference server applies them on the device
that holds the inputs, a chunk at a time (a 6 GiB input is varied with a few
hundred MB of float64 temporaries); the judge keeps a variant only where the
reference stays finite on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernelfix.tools.verdict import InputVariant

if TYPE_CHECKING:  # torch is imported where the variants are made (the reference worker), not by the judge
    import torch

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


def _student_draws(n: int, gen: torch.Generator, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A Student-t's normal and its chi-squared (``STUDENT_T_DOF`` squared normals summed), in that order from ``gen``."""
    import torch

    z = torch.randn(n, generator=gen, dtype=torch.float64, device=device)
    chi2 = torch.randn((STUDENT_T_DOF, n), generator=gen, dtype=torch.float64, device=device).pow(2).sum(0)
    return z, chi2


def _student_t(z: torch.Tensor, chi2: torch.Tensor) -> torch.Tensor:
    return z / (chi2 / STUDENT_T_DOF).sqrt()


def moments(x: torch.Tensor) -> tuple[float, float]:
    """(mean, standard deviation) of ``x``, a chunk at a time in float64."""
    from kernelfix.tools.correctness.chunked import Moments, chunks

    flat = x.detach().reshape(-1)
    m = Moments()
    for i, j in chunks(flat.numel()):
        m.add(flat[i:j].double())
    return (m.mean if m.n else 0.0), ((m.m2 / m.n) ** 0.5 if m.n > 1 else 0.0)


def _vary(
    x: torch.Tensor, variant: InputVariant, gen: torch.Generator, stats: tuple[float, float] | None = None
) -> torch.Tensor:
    import torch

    from kernelfix.tools.correctness import fused
    from kernelfix.tools.correctness.chunked import chunks

    flat = x.detach().reshape(-1)
    mean, std = stats if stats is not None else moments(x)
    out = torch.empty_like(x, memory_format=torch.contiguous_format)  # same dtype and device as the task's own
    dst = out.view(-1)
    shift = abs(mean) + SHIFT_STDS * std
    # a large input on the GPU: each chunk in one kernel, the same bits (its numbers on the device once); after a
    # kernel failed in this process (fused.failed), the torch loop makes every chunk left
    p = None
    if fused.varies(flat):
        p = fused.vary_params(
            x.device, *{"scaled": (SCALE,), "shifted": (shift,)}.get(variant, (mean, std, 1.0 / STUDENT_T_DOF))
        )
    for i, j in chunks(flat.numel()):
        if variant == "scaled":
            if p is not None and fused.enabled() and fused.vary_affine(flat[i:j], dst[i:j], p, shift=False):
                continue
            y = flat[i:j].double() * SCALE
        elif variant == "shifted":
            if p is not None and fused.enabled() and fused.vary_affine(flat[i:j], dst[i:j], p, shift=True):
                continue
            y = flat[i:j].double() - shift
        else:
            # torch draws (the generator's stream and the sum's order stay torch's); on the GPU the rest, four
            # float64 passes and the copy, is one kernel
            z, chi2 = _student_draws(j - i, gen, x.device)
            if p is not None and fused.enabled() and fused.vary_student(z, chi2, dst[i:j], p):
                continue
            y = mean + std * _student_t(z, chi2)
        dst[i:j].copy_(y)
    if x.is_contiguous():
        return out
    kept = torch.empty_like(x)  # the task's own layout (a transposed input stays transposed)
    kept.copy_(out)
    return kept


def apply(
    inputs: list[Any], variant: InputVariant, seed: int, known: dict[int, tuple[float, float]] | None = None
) -> tuple[list[Any], bool]:
    """The variant of ``inputs`` and whether any tensor changed (False: nothing floating-point to vary).
    ``known``: each floating tensor's (mean, std) by its position among them, filled here where missing: the
    same inputs (drawn again from the same seed) need them only once."""
    import torch

    gens: dict[torch.device, torch.Generator] = {}
    changed = False

    def gen_for(device: torch.device) -> torch.Generator:
        if device not in gens:
            gens[device] = torch.Generator(device=device).manual_seed(seed)
        return gens[device]

    position = 0

    def walk(obj: Any) -> Any:
        nonlocal changed, position
        if isinstance(obj, torch.Tensor) and obj.is_floating_point() and obj.numel():
            changed = True
            stats = None
            if known is not None:
                stats = known.get(position) or known.setdefault(position, moments(obj))
            position += 1
            return _vary(obj, variant, gen_for(obj.device), stats)
        if isinstance(obj, (list, tuple)):
            return type(obj)(walk(o) for o in obj)
        if isinstance(obj, dict):
            return {k: walk(v) for k, v in obj.items()}
        return obj

    return [walk(x) for x in inputs], changed
