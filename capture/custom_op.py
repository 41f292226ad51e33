"""The swapped kernel as a custom operator, so torch.compile(model, fullgraph=True) takes it whole.

A kernel's forward launches Triton kernels or calls a load_inline extension on raw
pointers: Dynamo cannot trace into either, and would break the graph there.
Registered with ``torch.library.custom_op`` as ``kernelfix::swap_<module>_<n>``
(schema ``(Tensor[] inputs) -> Tensor[]``: the call's tensors in, the output's
leaves out), it is one opaque node in the compiled graph.

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
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import torch
import torch.nn as nn
import torch.utils._pytree as pytree

_COUNTER = itertools.count(1)


def meta_reference(model: nn.Module) -> nn.Module:
    """The task's Model on the meta device: its shapes and dtypes, none of its memory."""
    return model.to("meta").eval()


def register(kernel: nn.Module, reference: nn.Module, module_path: str, sample: list[torch.Tensor]) -> tuple[Any, pytree.TreeSpec]:
    """The custom operator running ``kernel``, and the output structure to rebuild from its leaves.

    ``reference``: the task's Model on the meta device (the fake implementation); ``sample``: one
    captured call's tensors (meta is enough), to learn the output's structure.
    """
    name = f"kernelfix::swap_{re.sub(r'[^0-9A-Za-z]', '_', module_path)[:60]}_{next(_COUNTER)}"
    with torch.no_grad():
        _, out_spec = pytree.tree_flatten(reference(*[torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta") for t in sample]))

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        leaves = pytree.tree_leaves(kernel(*inputs))
        bases = {t.untyped_storage().data_ptr() for t in inputs if t.device.type != "meta"}
        out = []
        for t in leaves:
            t = t.contiguous()
            if t.untyped_storage().data_ptr() in bases:  # an output may not alias an input (the op's contract)
                t = t.clone()
            out.append(t)
        return out

    op = torch.library.custom_op(name, run, mutates_args=())

    @op.register_fake
    def _(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        device = inputs[0].device if inputs else torch.device("cpu")
        # Created under the fake mode torch.compile traces in: fake tensors, symbolic where the inputs are.
        weights = {n: torch.empty_strided(p.shape, p.stride(), dtype=p.dtype, device=device)
                   for n, p in [*reference.named_parameters(), *reference.named_buffers()]}
        out = torch.func.functional_call(reference, weights, tuple(inputs))
        return [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in pytree.tree_leaves(out)]

    return op, out_spec
