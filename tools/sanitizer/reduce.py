"""[one-shot child] The reduced input the sanitizer runs on: the failing trial's shapes, cut along the leading dimension.

Under racecheck or memcheck a kernel runs tens to thousands of times slower, so the full trial of a
KernelBench task (often over 1 GiB) would not finish in a minute. Most kernels treat the leading
dimension as independent rows or batch entries (a block or program per row), so a few rows run the
same code, on the same row length, strides and tails, as the whole tensor: each race, wild access
or divergent barrier of a row shows in a few rows. The cut:

- the "rows": the leading dimension of the largest tensor input, cut to the count that leaves it
  about ``max_elements`` elements (at least one row), chosen where it can be so that the cut keeps
  the whole tensor's tails: its element count modulo 4096 (a flat grid of blocks up to 4096 wide
  keeps its partial last block) and its row count modulo 64 (a grid of up to 64 rows a block);
- every tensor input whose leading dimension has that same size is cut with it (a batch shared by
  several inputs), others stay whole (weights, a matmul's second operand);
- each plan is checked against the task's own Model first: a cut it cannot run (shapes that must
  agree, a view of a fixed size) is dropped for the next: the largest input alone, then a larger
  count, then the whole trial;
- a failure that the smallest cut does not reproduce (a wrong output, a fault, a nondeterministic
  output) is tried at 8x and 64x the rows, then at full size, with the time left.

Pure functions of the shapes here (the plans, their words); ``cut`` applies one to tensors.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ALIGN_ROWS = 64  # a cut keeps the full row count's remainder modulo this, where it can
ALIGN_ELEMENTS = 4096  # ... and the full element count's remainder modulo this
GROWTH = (1, 8, 64)  # row counts tried, in multiples of the first, before the whole trial


class Plan(BaseModel):
    """Cut inputs ``which`` (indices into the forward's arguments) to their first ``rows`` rows; none: the whole trial."""

    model_config = ConfigDict(extra="forbid")

    rows: int | None = None
    of: int | None = None  # the leading size it cuts from
    which: list[int] = Field(default_factory=list)

    @property
    def reduced(self) -> bool:
        return self.rows is not None and bool(self.which)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def row_count(leading: int, row_elements: int, max_elements: int) -> int:
    """Rows of ``row_elements`` each that fit ``max_elements`` (at least one, at most ``leading``): the
    most that keep both tails (rows modulo ``ALIGN_ROWS``, elements modulo ``ALIGN_ELEMENTS``), else
    the most that keep the element tail, else the rows' tail, else the most that fit."""
    k = max(1, min(leading, max_elements // max(row_elements, 1)))
    if k >= leading:
        return leading
    flat = ALIGN_ELEMENTS // math.gcd(row_elements, ALIGN_ELEMENTS)  # rows whose elements make whole 4096s
    for step in (math.lcm(ALIGN_ROWS, flat), flat, ALIGN_ROWS):
        kept = k - (k - leading) % step
        if kept >= 1:
            return kept
    return k


def plans(shapes: list[tuple[int, ...] | None], max_elements: int) -> list[Plan]:
    """The cuts to try, smallest first, ending with the whole trial. ``shapes``: each forward argument's
    shape, None for what is no tensor."""
    tensors = [(i, s) for i, s in enumerate(shapes) if s is not None and len(s) >= 1]
    if not tensors:
        return [Plan()]
    big_i, big = max(tensors, key=lambda t: (_numel(t[1]), -t[0]))
    leading = big[0]
    if leading <= 1 or _numel(big) <= max_elements:
        return [Plan()]
    row = _numel(big) // leading
    together = [i for i, s in tensors if s[0] == leading]
    out: list[Plan] = []
    for g in GROWTH:
        k = row_count(leading, row, max_elements * g)
        if k >= leading:
            break
        for which in (together, [big_i]):
            p = Plan(rows=k, of=leading, which=which)
            if p not in out:
                out.append(p)
    return [*out, Plan()]


def describe(
    plan: Plan, shapes: list[tuple[int, ...] | None], names: list[str], dtypes: list[str] | None = None
) -> str:
    """ "x float32[32, 8192] (32 of 16384 rows)": the inputs as cut, by the forward's names."""
    parts = []
    for i, s in enumerate(shapes):
        if s is None:
            continue
        name = names[i] if i < len(names) else f"arg{i}"
        shape = list(s)
        if plan.reduced and i in plan.which:
            shape[0] = plan.rows
        dtype = dtypes[i] if dtypes and i < len(dtypes) and dtypes[i] else ""
        parts.append(f"{name} {dtype}[{', '.join(map(str, shape))}]")
    text = ", ".join(parts) or "no tensor inputs"
    if plan.reduced:
        text += f" ({plan.rows} of {plan.of} rows)"
    return text


def cut(inputs: list[Any], plan: Plan) -> list[Any]:
    """The inputs with ``plan``'s tensors cut to their first rows (contiguous copies)."""
    if not plan.reduced:
        return list(inputs)
    return [x[: plan.rows].contiguous().clone() if i in plan.which else x for i, x in enumerate(inputs)]
