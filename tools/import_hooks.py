"""[candidate worker, one-shot child] Run the judge's wrapper of a library when that library is imported, not before.

A candidate worker wraps ``torch.utils.cpp_extension`` (builds into the evaluation's dir, the
compiler watch) and Triton (the op recorder's suspension, the compiler watch) before the candidate
runs. Importing both for every candidate cost a Triton candidate the C++ extension machinery and a
CUDA one Triton; the fork server no longer preloads what the candidate's language does not need
(kernelfix.sandbox.zygote), so the wrapper is applied when the module's import completes, whoever
imports it, before the importer gets it back.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

_lock = threading.RLock()


def after_import(name: str, fn: Callable[[ModuleType], None]) -> None:
    """``fn(module)`` once ``name`` is imported: now if it is, else right after its import completes."""
    with _lock:
        module = sys.modules.get(name)
        if module is None:
            sys.meta_path.insert(0, _Finder(name, fn))
            return
    fn(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, fn: Callable[[ModuleType], None]):
        self.name, self.fn = name, fn

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        with _lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)  # once; the finders after it find the real spec
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, self.fn)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, fn: Callable[[ModuleType], None]):
        self.inner, self.fn = inner, fn

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__.loader = self.inner  # the module's own loader, as an import without the hook leaves it
        module.__loader__ = self.inner
        self.inner.exec_module(module)
        self.fn(module)
