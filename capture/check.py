"""Compare two outputs leaf by leaf, each tensor within the tolerance for its dtype."""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from kernelfix.capture.output_tolerance import tolerance_for
from kernelfix.capture.schema import LeafCheck, OutputCheck
from kernelfix.tools.config import JudgeConfig


def leaves_with_paths(obj: Any) -> tuple[list[tuple[str, Any]], pytree.TreeSpec]:
    flat, spec = pytree.tree_flatten_with_path(obj)
    return [(pytree.keystr(path) or "output", leaf) for path, leaf in flat], spec


def compare_outputs(got: Any, want: Any, config: JudgeConfig | None = None) -> OutputCheck:
    """``got`` against ``want``: same structure, then every tensor leaf close to its counterpart."""
    g, g_spec = leaves_with_paths(got)
    w, w_spec = leaves_with_paths(want)
    if g_spec != w_spec:
        return OutputCheck(
            ok=False, problem=f"the outputs differ in structure: {_shape_of(got)} where {_shape_of(want)} was expected"
        )
    checks = [_leaf(path, a, b, config) for (path, a), (_, b) in zip(g, w)]
    return OutputCheck(ok=all(c.ok for c in checks), leaves=checks)


def _shape_of(obj: Any) -> str:
    def one(x: Any) -> str:
        if isinstance(x, torch.Tensor):
            return f"{str(x.dtype).removeprefix('torch.')}[{', '.join(map(str, x.shape))}]"
        return repr(x)

    return str(pytree.tree_map(one, obj)).replace("'", "")


def _state_leaf(path: str, got: Any, want: Any, config: JudgeConfig | None) -> LeafCheck:
    """A state object in the output (a model's transformers cache): the same attributes, its tensors within tolerance."""
    from kernelfix.capture.state_args import Snapshot, show

    a, b = Snapshot.take(got).held, Snapshot.take(want).held
    if a.keys() != b.keys():
        missing, extra = sorted(map(show, b.keys() - a.keys())), sorted(map(show, a.keys() - b.keys()))
        return LeafCheck(
            path=path, ok=False, problem=f"{type(want).__name__} lacks {missing or '-'}, has besides {extra or '-'}"
        )
    worst = 0.0
    for p in sorted(b, key=repr):
        c = _leaf(f"{path}.{show(p)}", a[p].value, b[p].value, config)
        if not c.ok:
            return c
        worst = max(worst, c.max_abs_error or 0.0)
    return LeafCheck(path=path, ok=True, max_abs_error=worst)


def _leaf(path: str, got: Any, want: Any, config: JudgeConfig | None) -> LeafCheck:
    if not isinstance(want, torch.Tensor):
        from kernelfix.capture.state_args import is_state_object

        if type(got) is type(want) and is_state_object(want):
            return _state_leaf(path, got, want, config)
        ok = got == want if not isinstance(got, torch.Tensor) else False
        return LeafCheck(path=path, ok=bool(ok), problem=None if ok else f"{got!r} where {want!r} was expected")
    if not isinstance(got, torch.Tensor):
        return LeafCheck(path=path, ok=False, problem=f"{type(got).__name__} where a tensor was expected")
    if got.shape != want.shape:
        return LeafCheck(path=path, ok=False, problem=f"shape {list(got.shape)} where {list(want.shape)} was expected")
    if got.dtype != want.dtype:
        return LeafCheck(path=path, ok=False, problem=f"dtype {got.dtype} where {want.dtype} was expected")
    tol = tolerance_for(want.dtype, config)
    a = got.detach().to("cpu", torch.complex128 if want.is_complex() else torch.float64)
    b = want.detach().to("cpu", a.dtype)
    if a.numel() == 0:
        return LeafCheck(path=path, ok=True, max_abs_error=0.0, atol=tol.atol, rtol=tol.rtol)
    nan_a, nan_b = a.isnan(), b.isnan()
    if not torch.equal(nan_a, nan_b):
        return LeafCheck(
            path=path,
            ok=False,
            problem=f"NaN at {int((nan_a != nan_b).sum())} positions where the other has none",
            atol=tol.atol,
            rtol=tol.rtol,
        )
    diff = (a - b).abs().nan_to_num(0.0)  # equal infinities give NaN here: no error
    diff[(a == b)] = 0.0
    bound = tol.atol + tol.rtol * b.abs().nan_to_num(0.0, posinf=0.0, neginf=0.0)
    bad = diff > bound
    worst = int(diff.argmax())
    idx = [int(i) for i in torch.unravel_index(torch.tensor(worst), a.shape)] if a.dim() else []
    check = LeafCheck(
        path=path,
        ok=not bool(bad.any()),
        max_abs_error=float(diff.max()),
        max_rel_error=float((diff / (b.abs() + tol.atol)).nan_to_num(0.0).max()),
        worst_index=idx,
        atol=tol.atol,
        rtol=tol.rtol,
    )
    if not check.ok:
        check.problem = (
            f"{int(bad.sum())} of {a.numel()} elements outside {tol}; max abs error {check.max_abs_error:.3g} at {idx} "
            f"({_item(a, worst)} vs {_item(b, worst)})"
        )
    return check


def _item(t: torch.Tensor, flat_index: int) -> str:
    return f"{t.reshape(-1)[flat_index].item():.6g}"


HALF = (torch.float16, torch.bfloat16)


def truth_rule(got: Any, want: Any, truth: Any, config: JudgeConfig | None, check: OutputCheck) -> OutputCheck:
    """Half-precision outputs that fail the element-wise tolerance, judged as the judge judges them against float64:
    ``got`` passes when its error against ``truth`` (the same computation in higher precision) is within
    ``truth_factor`` times ``want``'s own error against it (relative error norm, per tensor). Rounding in bfloat16
    differs with every kernel's order of operations, and through a deep model those differences grow past any fixed
    tolerance while each output stays as close to the exact result as the original's own."""
    factor = (config.truth_factor if config is not None else None) or 8.0
    g, gs = leaves_with_paths(got)
    w, _ = leaves_with_paths(want)
    t, ts = leaves_with_paths(truth)
    if gs != ts or len(g) != len(t):
        return check
    worst = []
    for (path, a), (_, b), (_, c) in zip(g, w, t):
        if not isinstance(b, torch.Tensor) or not b.is_floating_point():
            continue
        if b.dtype not in HALF:
            one = _leaf(path, a, b, config)
            if not one.ok:
                return check
            continue
        ref = c.detach().to("cpu", torch.float64)
        scale = float(ref.norm()) or 1.0
        err_got = float((a.detach().to("cpu", torch.float64) - ref).norm()) / scale
        err_want = float((b.detach().to("cpu", torch.float64) - ref).norm()) / scale
        if not err_got <= factor * max(err_want, 1e-12):
            return check
        worst.append(f"{path}: {err_got:.3g} against {err_want:.3g}")
    if not worst:
        return check
    return OutputCheck(
        ok=True,
        leaves=check.leaves,
        problem=None,
        note=f"outside the element-wise tolerance, but as close to the exact result (float32 or wider) as the "
        f"original's own arithmetic, within {factor:g}x (relative error norm: {'; '.join(worst[:3])})",
    )
