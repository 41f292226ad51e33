"""The tolerance a captured output is held to, by dtype.

One function on purpose: capture's reproduction check and load_best's swap check
both call it, and it is the single place to point at the judge's own per-dtype
tolerances once the judge has them.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict

from kernelfix.tools.config import JudgeConfig

# The judge's coming per-dtype defaults: float32/64 1e-4, half precision 1e-2; exact elsewhere.
_BY_DTYPE = {torch.float64: 1e-4, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


_DEFAULT = JudgeConfig()  # a config whose atol/rtol are these was not tuned by the user (a session stores every field)


class Tolerance(BaseModel):
    model_config = ConfigDict(frozen=True)

    atol: float
    rtol: float

    def __str__(self) -> str:
        return f"atol {self.atol:g}, rtol {self.rtol:g}"


def tolerance_for(dtype: torch.dtype, config: JudgeConfig | None = None) -> Tolerance:
    """atol/rtol for outputs of ``dtype``: the config's when the user changed them, else the per-dtype default."""
    if config is not None and (config.atol, config.rtol) != (_DEFAULT.atol, _DEFAULT.rtol):
        return Tolerance(atol=config.atol, rtol=config.rtol)
    if dtype.is_complex:
        dtype = torch.float32 if dtype == torch.complex64 else torch.float64
    tol = _BY_DTYPE.get(dtype, 1e-2 if dtype.is_floating_point else 0.0)  # float8 and the like: loose; integers: exact
    return Tolerance(atol=tol, rtol=tol)
