"""[any] --backward: one trial's forward with grad and backward, the same way in both workers (docs/backward.md).

The reference worker draws the cotangent from the trial's seed and sends it with the inputs; each
side makes its floating inputs fresh leaves that require grad, clears its parameters' ``.grad``,
runs forward with grad on and ``torch.autograd.backward(out, cotangent)``. The gradients compared
are those the reference gets: of each floating input (its index among the inputs' tensors) and each
trainable parameter (its index in ``parameters()``, named by the reference's name for it).
"""

from __future__ import annotations

from typing import Any

from kernelfix.tools.transport import flatten, unflatten

COTANGENT_SALT = 0x9E3779B1  # the cotangent's generator seed is the trial's seed plus this: never the inputs' stream

NO_BACKWARD = "the task has no backward"  # how the reference worker's TaskProblem starts: `kernelfix baseline` makes it a row of its own

NO_GRAD_HINT = (
    "put the kernels in a torch.autograd.Function whose backward launches your backward kernels (docs/backward.md)"
)


def floating(obj: Any) -> list:
    import torch

    return [t for t in flatten(obj)[1] if isinstance(t, torch.Tensor) and t.is_floating_point()]


def grad_leaves(inputs: list) -> tuple[list, list]:
    """The inputs with each floating tensor a fresh leaf that requires grad (sharing its memory), and the flat tensor list."""
    import torch

    skel, tensors = flatten(list(inputs))
    leaves = [
        t.detach().requires_grad_() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in tensors
    ]
    return unflatten(skel, leaves), leaves


def cotangents(out: Any, seed: int) -> list:
    """One random cotangent per floating output tensor, drawn from the trial's seed on the output's device."""
    import torch

    cots = []
    for i, o in enumerate(floating(out)):
        gen = torch.Generator(device=o.device).manual_seed((seed + COTANGENT_SALT + i) % 2**63)
        cots.append(torch.randn(o.shape, dtype=o.dtype, device=o.device, generator=gen))
    return cots


def warm_backward(model: Any, inputs: list) -> None:
    """Forward with grad and backward on a cotangent of its own, grads cleared after: the backward's
    kernels compile (and autotune) here, before anything is judged, timed or profiled."""
    import torch

    args, _ = grad_leaves(inputs)
    with torch.enable_grad():
        out = model(*args)
        outs = [o for o in floating(out) if o.requires_grad]
        if outs:
            torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])
    clear_grads(model)


def clear_grads(model: Any) -> None:
    if hasattr(model, "parameters"):
        for p in model.parameters():
            p.grad = None  # fresh .grad each trial: nothing accumulates across trials


def backward(out: Any, cots: list) -> str | None:
    """``out.backward(cotangent)`` over the floating outputs that carry a gradient; why not, when none does."""
    import torch

    outs = floating(out)
    if len(outs) != len(cots):
        return f"forward returned {len(outs)} floating-point tensors, expected {len(cots)}"
    pairs = [(o, c) for o, c in zip(outs, cots) if o.requires_grad]
    if not pairs:
        return "the output carries no gradient (it does not require grad: nothing connects it to the inputs and parameters through autograd)"
    torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
    return None


def reference_grads(model: Any, leaves: list) -> tuple[list[dict[str, Any]], list]:
    """The gradients the reference got: keys (GradKey fields) and tensors, inputs first, then parameters."""
    keys: list[dict[str, Any]] = []
    grads: list = []
    for i, t in enumerate(leaves):
        if getattr(t, "grad", None) is not None:
            keys.append({"kind": "input", "index": i, "name": f"grad of input {i}"})
            grads.append(t.grad)
    if hasattr(model, "named_parameters"):
        for k, (name, p) in enumerate(model.named_parameters()):
            if p.grad is not None:
                keys.append({"kind": "parameter", "index": k, "name": f"grad of parameter {name}"})
                grads.append(p.grad)
    return keys, grads


def candidate_grads(model: Any, leaves: list, keys: list[Any], fill: list) -> tuple[list, str | None]:
    """The candidate's gradients for the reference's ``keys``; a missing one is ``fill``'s tensor (zeros), and named."""
    params = list(model.parameters()) if hasattr(model, "parameters") else []
    grads, missing = [], []
    for key, zero in zip(keys, fill):
        if key.kind == "input":
            t = leaves[key.index] if key.index < len(leaves) else None
            g = getattr(t, "grad", None)
        else:
            if key.index >= len(params):
                missing.append(
                    f"{key.name.removeprefix('grad of ')} has no counterpart (ModelNew has {len(params)} parameters)"
                )
                grads.append(zero)
                continue
            g = params[key.index].grad
        if g is None:
            missing.append(f"{key.name} is missing")
        grads.append(g if g is not None else zero)
    why = None
    if missing:
        why = (
            "; ".join(missing[:3])
            + (f" (and {len(missing) - 3} more)" if len(missing) > 3 else "")
            + (": backward returned None for it, or forward used it outside autograd")
        )
    return grads, why


def timed_passes(
    model: Any, inputs: list, cots: list, *, params_of: Any = None, strict: bool = False
) -> tuple[Any, Any]:
    """``--backward`` timing's two callables, for the reference's workers and the candidate's alike: a
    forward with grad enabled, and a forward+backward on the trial's cotangent (every ``.grad`` set to
    None first, as a training step's zero_grad). ``params_of``: the module whose parameters collect the
    gradients (torch.compile's wrapper shares its original's); ``strict``: an output with no gradient raises."""
    import torch

    args, leaf_list = grad_leaves(inputs)
    owner = params_of if params_of is not None else model

    def forward() -> None:
        with torch.enable_grad():
            model(*args)

    def forward_backward() -> None:
        for x in leaf_list:
            if isinstance(x, torch.Tensor):
                x.grad = None
        clear_grads(owner)
        with torch.enable_grad():
            missing = backward(model(*args), cots)
        if strict and missing is not None:
            raise RuntimeError("the output carries no gradient")

    return forward, forward_backward
