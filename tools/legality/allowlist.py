"""[judge] Which aten ops a candidate's forward may run: only non-computational ones.

The base list is the MusaCoder paper's (Appendix J), as given in DESIGN.md.
The second list holds what those ops decompose into or are spelled as at the
dispatcher (``torch.zeros`` runs ``aten::zero_``, ``.to()`` runs
``aten::_to_copy``): moving, viewing, allocating or filling memory, never
computing the task's function. Tasks may extend the list in config (a fused
epilogue task may allow ``mm``; ``kernelfix tune`` allows the vendor's GEMMs and
attention, as Liger Kernel leaves them to cuBLAS and cuDNN).

An allowed op brings what it runs as at the dispatcher, where the op recorder
sees it: a composite call (``linear``, ``matmul``, ``scaled_dot_product_attention``)
is never dispatched itself but as the ops it decomposes into (``LIBRARY_PARTS``),
and an op's own derivative, where torch has one (``X_backward``: the attention
backends' gradients), is that library's backward. Nothing else comes with it:
the sums autograd adds around it (a bias's gradient, a tensor used twice) stay
the candidate's to compute.
"""

from __future__ import annotations

from collections.abc import Iterable

PAPER_ALLOWED: frozenset[str] = frozenset(
    """
    _assert_async _assert_scalar _assert_tensor_metadata alias arange as_strided
    broadcast_to clone contiguous copy_ empty empty_like empty_strided expand
    flatten full ones permute rand randint randn reshape select slice squeeze
    stride transpose unsqueeze view zeros _local_scalar_dense allclose equal item
    """.split()
)

DECOMPOSITION_ALLOWED: frozenset[str] = frozenset(
    """
    _to_copy to detach lift_fresh lift_fresh_copy _unsafe_view _reshape_alias view_as
    expand_as t unbind split split_with_sizes chunk narrow new_empty new_empty_strided
    new_zeros new_ones new_full zeros_like ones_like full_like zero_ fill_ empty_permuted
    resize_ is_same_size sym_size sym_stride sym_numel sym_storage_offset size numel dim
    is_contiguous data_ptr _has_compatible_shallow_copy_type resolve_conj resolve_neg
    normal_ uniform_ random_ set_ record_stream
    """.split()
)

DEFAULT_ALLOWED: frozenset[str] = PAPER_ALLOWED | DECOMPOSITION_ALLOWED


def base_name(op: str) -> str:
    """``aten::mm`` / ``aten.mm.default`` / ``mm`` -> ``mm``."""
    if "::" in op:
        op = op.split("::", 1)[1]
    elif op.startswith("aten."):
        op = op[len("aten.") :]
    return op.split(".", 1)[0]


def is_aten(op: str) -> bool:
    return op.startswith("aten::") or op.startswith("aten.")


# The vendor's GEMMs and attention, as `kernelfix tune` allows them to its sessions (Liger Kernel's split: cuBLAS and
# cuDNN do the GEMMs and attention, the kernel fuses what lies between them).
LIBRARY_GEMM_ATTENTION: tuple[str, ...] = (
    "mm",
    "addmm",
    "bmm",
    "linear",
    "matmul",
    "_grouped_mm",
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
)

# Composite library calls -> the dispatcher ops they run as (the recorder sees these, never the composite itself).
LIBRARY_PARTS: dict[str, tuple[str, ...]] = {
    "linear": ("mm", "addmm"),
    "matmul": ("mm", "bmm", "mv", "dot"),
    "scaled_dot_product_attention": (
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
    ),
}


def library_ops(extra: Iterable[str]) -> frozenset[str]:
    """The ops a list of allowed extras stands for: each op, its parts (``LIBRARY_PARTS``) and their backward ops."""
    names = {base_name(o) for o in extra}
    names |= {p for n in list(names) for p in LIBRARY_PARTS.get(n, ())}
    return frozenset(names | {f"{n}_backward" for n in names})


def make_allowed(extra: Iterable[str] = (), remove: Iterable[str] = ()) -> frozenset[str]:
    return (DEFAULT_ALLOWED | library_ops(extra)) - {base_name(o) for o in remove}


def is_allowed(op: str, allowed: frozenset[str] = DEFAULT_ALLOWED) -> bool:
    """Whether one dispatcher op is allowed. Non-aten ops (the candidate's own
    custom ops, profiler ranges) are not aten work and pass; what they call
    inside is checked on its own."""
    if not is_aten(op):
        return True
    name = base_name(op)
    return name in allowed or name.startswith("_cast_")
