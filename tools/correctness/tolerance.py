"""[judge, reference worker, one-shot child] atol and rtol by the output's dtype, as KernelBench's current eval sets them.

KernelBench (src/kernelbench/eval.py, ``get_tolerance_for_precision``, after
torchbench) checks float32 outputs at atol = rtol = 1e-4 and float16/bfloat16 at
1e-2, so fast_p here means what it means in published numbers. A configured
``atol``/``rtol`` overrides the table for every dtype.
"""

from __future__ import annotations

DTYPE_TOLERANCE: dict[str, float] = {
    "float64": 1e-4,  # no looser than float32's: KernelBench has no float64 tasks
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 1e-2,
    "float8_e4m3fn": 1.25e-1,
    "float8_e5m2": 2.5e-1,
    "complex64": 1e-4,
    "complex128": 1e-4,
}
DEFAULT = 1e-4  # any other floating dtype; integer and bool outputs compare exactly


def tolerance(dtype, atol: float | None = None, rtol: float | None = None) -> tuple[float, float]:
    """(atol, rtol) for an output of ``dtype`` (a torch.dtype or its name); configured values win."""
    name = str(dtype).removeprefix("torch.")
    t = DTYPE_TOLERANCE.get(name, DEFAULT)
    return (t if atol is None else atol), (t if rtol is None else rtol)


def describe(atol: float | None, rtol: float | None) -> str:
    """For reports and prompts: what tolerance applies."""
    if atol is not None and rtol is not None:
        return f"atol {atol:g}, rtol {rtol:g}"
    by = ", ".join(f"{k} {v:g}" for k, v in DTYPE_TOLERANCE.items() if k in ("float32", "float16", "bfloat16"))
    fixed = ", ".join(f"{n}={v:g}" for n, v in (("atol", atol), ("rtol", rtol)) if v is not None)
    return f"atol = rtol by output dtype ({by})" + (f", except {fixed}" if fixed else "")
