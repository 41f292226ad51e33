"""The tolerance a captured output is held to: the judge's own, by dtype.

capture's reproduction check and load_best's swap check both call tolerance_for,
which defers to the judge's table (kernelfix.tools.correctness.tolerance: float32
1e-4, float16/bfloat16 1e-2, KernelBench's) and to atol/rtol set in the config,
so "within the judge's tolerance" means the same thing everywhere.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict

from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.correctness.tolerance import tolerance


class Tolerance(BaseModel):
    model_config = ConfigDict(frozen=True)

    atol: float
    rtol: float

    def __str__(self) -> str:
        return f"atol {self.atol:g}, rtol {self.rtol:g}"


def tolerance_for(dtype: torch.dtype, config: JudgeConfig | None = None) -> Tolerance:
    """atol/rtol for outputs of ``dtype``: the judge's per-dtype table, or the config's atol/rtol where set."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return Tolerance(atol=0.0, rtol=0.0)  # integers and bools compare exactly, as in the judge
    atol, rtol = tolerance(dtype, config.atol if config else None, config.rtol if config else None)
    return Tolerance(atol=atol, rtol=rtol)
