"""[candidate worker] Triton's CPU interpreter without its repeated patching: what a kernel judged on a machine
without a GPU runs in (TRITON_INTERPRET=1).

The interpreter swaps triton.language's builtins for interpreted ones when a kernel is launched, and undoes it when
the launch ends. It also does the whole swap again at every call of a ``@triton.jit`` device function inside the
kernel: ``tl.sum``, ``tl.max``, ``tl.zeros`` and one's own helpers are such functions, so a kernel's every program
walked all of triton.language's members (``inspect.getmembers``) at each of them. Nothing is undone between those
calls, and swapping twice gives what swapping once gave, so within one launch each set of language modules is
swapped once here: the first device call that sees a module the launch has not swapped swaps it, as the
interpreter would; later calls find it swapped. The kernel computes the same values (tests/test_fused_check.py
compares the fused check's every output through the interpreter; this took 33 s there, and 23 s with it).

Applied only where the interpreter has the shape this was written against (Triton 3.x's ``GridExecutor.__call__``
and ``InterpretedFunction.__call__`` both calling the module's ``_patch_lang``); anything else is left as it is.
"""

from __future__ import annotations

import inspect
from typing import Any

_INSTALLED = "_kernelfix_patch_once"


def patch_once() -> bool:
    """Install the once-per-launch swap in Triton's interpreter; False where it does not apply."""
    try:
        from triton import language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    parts = [getattr(interpreter, name, None) for name in ("GridExecutor", "InterpretedFunction", "_patch_lang")]
    scope_cls = getattr(interpreter, "_LangPatchScope", None)
    grid, device_fn, original = parts
    if grid is None or device_fn is None or original is None or scope_cls is None:
        return False
    if getattr(original, _INSTALLED, False):
        return True
    if not all("_patch_lang(self.fn)" in _source(cls.__call__) for cls in (grid, device_fn)):
        return False
    langs_of = _langs_of(tl)
    launch: list[_Launch | None] = [None]  # the launch under way, if any

    def patch_lang(fn: Any) -> Any:
        now = launch[0]
        if now is None:
            return original(fn)
        langs = langs_of(fn)
        if now.started and langs <= now.swapped:
            return scope_cls()  # a device call: swapped already in this launch (the interpreter drops its scope)
        now.started = True  # the first call is the launch's own swap, which the launch's end undoes
        now.swapped |= langs
        return original(fn)

    launch_call = grid.__call__

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer, launch[0] = launch[0], _Launch()
        try:
            return launch_call(self, *args, **kwargs)
        finally:
            launch[0] = outer

    setattr(patch_lang, _INSTALLED, True)
    interpreter._patch_lang = patch_lang
    grid.__call__ = call
    return True


class _Launch:
    def __init__(self) -> None:
        self.started = False
        self.swapped: set[int] = set()


def _langs_of(tl: Any):
    def langs(fn: Any) -> set[int]:
        # the interpreter's own rule: the modules triton.language and triton.language.core the function's globals name
        return {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)}

    return langs


def _source(fn: Any) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""
