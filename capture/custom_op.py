"""The swapped kernel as one opaque custom operator, for torch.compile when Dynamo cannot trace it.

A kernel's forward launches Triton kernels or calls a load_inline extension on raw
pointers. Where Dynamo can trace that forward (capture/compile_path.py checks it), the
compiled model calls the kernel's own launches; where it cannot (Triton's CPU interpreter,
an extension whose functions could not be made operators, a forward Dynamo refuses), the
kernel is registered as ``kernelfix::swap_<module>_<n>`` (schema ``(Tensor[] inputs) ->
Tensor[]``: the call's tensors in, the output's leaves out) and is one opaque node in the
compiled graph, which calls back into Python to run it. Eager calls never take it
(capture/swap.py calls the kernel directly). It is defined on a ``torch.library.Library``
fragment rather than with ``torch.library.custom_op``, whose Python layer (argument
handling, an autograd wrapper) cost about 6 us a call more.

Its fake implementation (the shapes and dtypes torch.compile traces with) runs
the *task's* Model, the captured module's ATen graph, on the fake inputs with
fake weights: every ATen op has a shape rule, the weights cost no memory (the
model is kept on the meta device), and a dimension that varies between captured
calls stays symbolic (a task captured with ``--calls`` is exported with those
dimensions dynamic), so one rule serves every captured shape and the output's
shape follows the input's exactly as the module's did. A table of recorded
signatures would fail on the symbolic sizes torch.compile uses once it has seen
a second shape; the kernel itself cannot run on fake tensors.

The contract the fake states, the real implementation keeps: outputs are
contiguous and never alias an input (the kernel's own outputs are copied when
they are not so).

A task captured in training (``BACKWARD = True``) registers the backward too: the
kernel's trainable parameters become the operator's second input list (so autograd
and torch.compile see that the output depends on them), and its autograd formula is a
second opaque operator, ``<name>_backward``, that runs the kernel's forward again with
grad enabled and its own backward (the ``torch.autograd.Function`` that was judged)
from the incoming gradients. The forward is recomputed rather than its graph kept,
because a custom operator's output carries no autograd graph of its own.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

_COUNTER = itertools.count(1)
_LIBRARIES: list[torch.library.Library] = []


def _autograd_inside_op() -> Any:
    """Autograd back on inside a custom operator's implementation, which the dispatcher runs with the
    autograd keys excluded (pytorch/pytorch#136771): the backward operator records the kernel's
    forward again to run its backward. Everything else the dispatcher excluded stays excluded."""
    key = torch._C.DispatchKey
    excluded = torch._C._dispatch_tls_local_exclude_set()
    kept = excluded.remove(key.AutogradFunctionality).remove(key.AutogradOther).remove(key.ADInplaceOrView)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), kept)


def meta_reference(model: nn.Module) -> nn.Module:
    """The task's Model on the meta device: its shapes and dtypes, none of its memory."""
    return model.to("meta").eval()


def register(
    kernel: nn.Module, reference: nn.Module, module_path: str, sample: list[torch.Tensor], *, backward: bool = False
) -> tuple[Any, pytree.TreeSpec, list[int]]:
    """The custom operator running ``kernel``, the output structure to rebuild from its leaves, and which of the
    structure's leaves the operator returns (its tensors: a None in the output, as a transformers attention's unused
    weights, is no tensor an operator can return, and stays None in the rebuilt output).

    ``reference``: the task's Model on the meta device (the fake implementation); ``sample``: one
    captured call's tensors (meta is enough), to learn the output's structure. ``backward``: the
    operator takes ``(inputs, params)`` (the kernel's trainable parameters) and has an autograd formula.
    """
    name = f"kernelfix::swap_{re.sub(r'[^0-9A-Za-z]', '_', module_path)[:60]}_{next(_COUNTER)}"
    with torch.no_grad():
        ref_leaves, out_spec = pytree.tree_flatten(
            reference(*[torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in sample])
        )
    tensor_at = [i for i, leaf in enumerate(ref_leaves) if isinstance(leaf, torch.Tensor)]

    def tensors(out: Any) -> list:
        leaves = pytree.tree_leaves(out)
        return [leaves[i] for i in tensor_at]

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        out = tensors(kernel(*inputs))
        bases = {x.untyped_storage().data_ptr() for x in inputs}
        for k, t in enumerate(out):
            t = t.contiguous()
            out[k] = (
                t.clone() if t.untyped_storage().data_ptr() in bases else t
            )  # an output may not alias an input (the op's contract)
        return out

    def fake(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        device = inputs[0].device if inputs else torch.device("cpu")
        # Created under the fake mode torch.compile traces in: fake tensors, symbolic where the inputs are.
        weights = {
            n: torch.empty_strided(p.shape, p.stride(), dtype=p.dtype, device=device)
            for n, p in [*reference.named_parameters(), *reference.named_buffers()]
        }
        out = torch.func.functional_call(reference, weights, tuple(inputs))
        return [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in tensors(out)]

    # torch.library.Library rather than torch.library.custom_op: the same operator, but the dispatcher calls
    # ``run`` directly (custom_op adds a Python autograd layer and argument handling on every call: 6 us more).
    lib = torch.library.Library("kernelfix", "FRAGMENT")
    _LIBRARIES.append(lib)  # an operator lives as long as its Library object: for the process
    short = name.split("::")[1]
    if not backward:
        lib.define(f"{short}(Tensor[] inputs) -> Tensor[]")
        lib.impl(short, run, "CompositeExplicitAutograd")
        torch.library.register_fake(name, fake, lib=lib)
        return getattr(torch.ops.kernelfix, short).default, out_spec, tensor_at

    # The parameters are passed only so that autograd and the compiled graph see them; the kernel uses its own.
    def run_trained(inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
        return run(inputs)

    def fake_trained(inputs: list[torch.Tensor], params: list[torch.Tensor]) -> list[torch.Tensor]:
        return fake(inputs)

    lib.define(f"{short}(Tensor[] inputs, Tensor[] params) -> Tensor[]")
    lib.impl(short, run_trained, "CompositeExplicitAutograd")
    torch.library.register_fake(name, fake_trained, lib=lib)
    op = getattr(torch.ops.kernelfix, short).default

    def run_backward(
        inputs: list[torch.Tensor], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        """Gradients of the inputs, then of the parameters (zeros where none flows): the kernel's forward
        again, with grad enabled, and its own backward."""
        with _autograd_inside_op(), torch.enable_grad():
            ins = [t.detach().requires_grad_(True) if t.is_floating_point() else t for t in inputs]
            outs = tensors(kernel(*ins))
            # The kernel's own parameters, which its forward used: what the op was handed for them may be
            # another tensor of the same values (a compiled graph's saved input), outside this graph.
            own = [p for p in kernel.parameters() if p.requires_grad]
            wrt = [t for t in ins if t.requires_grad] + (own if len(own) == len(params) else list(params))
            pairs = [(o, g) for o, g in zip(outs, grads) if isinstance(o, torch.Tensor) and o.requires_grad]
            got = (
                torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)
                if pairs and wrt
                else [None] * len(wrt)
            )
        it = iter(got)
        out = [next(it) if t.requires_grad else None for t in ins] + [next(it) for _ in params]
        every = [*inputs, *params]
        return [torch.zeros_like(x) if g is None else g.contiguous() for g, x in zip(out, every)]

    def fake_backward(
        inputs: list[torch.Tensor], params: list[torch.Tensor], grads: list[torch.Tensor]
    ) -> list[torch.Tensor]:
        return [torch.empty_like(x) for x in [*inputs, *params]]

    lib.define(f"{short}_backward(Tensor[] inputs, Tensor[] params, Tensor[] grads) -> Tensor[]")
    lib.impl(f"{short}_backward", run_backward, "CompositeExplicitAutograd")
    torch.library.register_fake(f"{name}_backward", fake_backward, lib=lib)
    bwd = getattr(torch.ops.kernelfix, f"{short}_backward").default

    def setup_context(ctx: Any, inputs: tuple, output: Any) -> None:
        ins, params = inputs
        ctx.n_in = len(ins)
        ctx.save_for_backward(*ins, *params, *output)

    def backward(ctx: Any, grads: list[torch.Tensor | None]) -> tuple[list, list]:
        saved = ctx.saved_tensors
        ins, rest = list(saved[: ctx.n_in]), saved[ctx.n_in :]
        params, outs = list(rest[: len(rest) - len(grads)]), rest[len(rest) - len(grads) :]
        full = [torch.zeros_like(o) if g is None else g for g, o in zip(grads, outs)]
        got = bwd(ins, params, full)
        return ([g if t.is_floating_point() else None for g, t in zip(got[: ctx.n_in], ins)], list(got[ctx.n_in :]))

    torch.library.register_autograd(name, backward, setup_context=setup_context, lib=lib)
    return op, out_spec, tensor_at


def op_name(op: Any) -> str:
    """kernelfix::swap_model_gate_1"""
    return op._schema.name
