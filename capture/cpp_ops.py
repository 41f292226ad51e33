"""A CUDA extension's functions as C++ operators, so a compiled model calls them without Python.

A candidate builds its extension with ``load_inline(..., functions=[...])``: pybind functions,
which Dynamo cannot trace (it would break the graph there). While load_best imports the
session's best.py, :func:`registering` wraps ``load_inline`` so that the same build also
registers each listed function as an operator of a library of its own
(``TORCH_LIBRARY_FRAGMENT(kernelfix_<hash>, m)``, schema inferred from the C++ signature,
kernels for the CUDA and CPU keys): one build, as the candidate's own, with a few lines added to
its ``cpp_sources``. ``int`` and ``float`` parameters, which a schema cannot hold, are widened to
``int64_t`` and ``double`` by a template adapter. Where that does not compile (an overloaded
name, a parameter type with no schema), the candidate's own sources are built instead and the
kernel takes the opaque custom operator under torch.compile (capture/compile_path.py says why).

The candidate gets back a module whose listed functions call the pybind function in eager mode
(the C++ function, as the judge ran it) and the operator while Dynamo traces, on contiguous
inputs. Dynamo needs each operator's output shapes without running it: the fake implementation
answers from what the function returned on the calls load_best checks the kernel on, keyed by
the inputs' dtypes and shapes (only captured shapes reach the kernel, and their intermediate
shapes follow from them). A function whose outputs are not fresh contiguous tensors (it writes
into an input, returns a view of one) or whose output shape changed with the input's values
(checked on a second run with other values) has no such rule, and the kernel takes the opaque
custom operator.

Trust: best.py is the code the judge passed, imported into the user's process as load_best
always did; the added registration is kernelfix's text, and the function names come from the
candidate's ``functions`` argument, accepted only as C++ identifiers.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import Tensor
from torch.compiler import is_compiling

REGISTRATION = r"""
// kernelfix (capture/cpp_ops.py): the listed functions also as operators of {ns}, for torch.compile
#include <torch/library.h>
#include <cstdint>
#include <exception>
#include <type_traits>
#include <vector>
namespace kernelfix_ops {{
// A schema holds int64_t, double and their lists: int, float and their vectors are widened on the way in.
template <class T> struct schema_type {{ using type = T; }};
template <> struct schema_type<int> {{ using type = int64_t; }};
template <> struct schema_type<long long> {{ using type = int64_t; }};
template <> struct schema_type<float> {{ using type = double; }};
template <> struct schema_type<std::vector<int>> {{ using type = std::vector<int64_t>; }};
template <> struct schema_type<std::vector<float>> {{ using type = std::vector<double>; }};
template <class T> using bare_t = std::remove_cv_t<std::remove_reference_t<T>>;
template <class T> using arg_t = typename schema_type<bare_t<T>>::type;
template <class T> struct is_vector : std::false_type {{}};
template <class T> struct is_vector<std::vector<T>> : std::true_type {{}};
template <class A> decltype(auto) pass(arg_t<A>& a) {{
  using D = bare_t<A>;
  if constexpr (std::is_same_v<D, arg_t<A>>) return (a);  // as it is: a reference binds to it
  else if constexpr (is_vector<D>::value) return D(a.begin(), a.end());
  else return static_cast<D>(a);
}}
template <auto F> struct op;
template <class R, class... A, R (*F)(A...)> struct op<F> {{
  static auto call(arg_t<A>... a) {{
    if constexpr (std::is_void_v<R>) F(pass<A>(a)...);
    else if constexpr (std::is_arithmetic_v<R>) return static_cast<arg_t<R>>(F(pass<A>(a)...));
    else return F(pass<A>(a)...);
  }}
}};
}}  // namespace kernelfix_ops
TORCH_LIBRARY_FRAGMENT({ns}, m) {{
  // A signature with no schema throws here, while the library loads: caught, so that function stays pybind only.
{defs}
}}
"""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass
class Observed:
    """What one function returned for one kind of call: each output leaf's shape and dtype, and the structure."""

    spec: pytree.TreeSpec
    outputs: list[tuple[tuple[int, ...], torch.dtype] | None]


@dataclass
class ExtensionFunction:
    name: str
    pybind: Any
    op: Any  # torch.ops.<ns>.<name>
    seen: dict[tuple, Observed] = field(default_factory=dict)
    unsafe: str | None = None  # why its outputs have no shape rule


@dataclass
class Extension:
    """One load_inline call of the candidate's."""

    name: str
    namespace: str | None = None
    functions: dict[str, ExtensionFunction] = field(default_factory=dict)
    error: str | None = None  # why its functions are not operators

    def problem(self) -> str | None:
        """Why the kernel cannot be traced through this extension, or None."""
        if self.error:
            return self.error
        bad = [f"{f.name} ({f.unsafe})" for f in self.functions.values() if f.unsafe]
        return f"extension {self.name}: no shape rule for {', '.join(bad)}" if bad else None


class Recorder:
    """Records the extension functions' outputs while load_best runs the kernel eagerly."""

    def __init__(self) -> None:
        self.extensions: list[Extension] = []
        self.on = False
        self.second_run = False  # the same calls again with other values: an output shape that moves is data-dependent

    def record(self, fn: ExtensionFunction, args: tuple, kwargs: dict) -> Any:
        leaves = pytree.tree_leaves((args, kwargs))
        before = [t.clone() for t in leaves if isinstance(t, torch.Tensor)]
        out = fn.pybind(*args, **kwargs)
        if fn.unsafe:
            return out
        tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
        if any(not t.is_contiguous() for t in tensors):
            fn.unsafe = "called on a non-contiguous tensor"
        elif any(not _same(a, b) for a, b in zip(before, tensors)):
            fn.unsafe = "writes into an input"
        flat, spec = pytree.tree_flatten(out)
        bases = {t.untyped_storage().data_ptr() for t in tensors}
        metas: list[tuple[tuple[int, ...], torch.dtype] | None] = []
        for o in flat:
            if not isinstance(o, torch.Tensor):
                if o is not None:
                    fn.unsafe = f"returns a {type(o).__name__}"
                metas.append(None)
            elif not o.is_contiguous() or o.untyped_storage().data_ptr() in bases:
                fn.unsafe = "returns a view of an input or a non-contiguous tensor"
            else:
                metas.append((tuple(o.shape), o.dtype))
        key = _key(args, kwargs)
        seen = fn.seen.get(key)
        if seen is None and not self.second_run:
            fn.seen[key] = Observed(spec, metas)
        elif seen is None or seen.spec != spec or seen.outputs != metas:
            fn.unsafe = "its output's shape depends on the input's values"
        return out

    def problem(self) -> str | None:
        for ext in self.extensions:
            p = ext.problem()
            if p:
                return p
        return None

    def register_fakes(self) -> None:
        """Each operator's fake implementation, answering from what was seen. An operator is registered once
        per process; a later load of the same extension (the same sources: the namespace is their hash)
        adds what it saw to the same table."""
        for ext in self.extensions:
            for fn in ext.functions.values():
                if not fn.seen or fn.unsafe:
                    continue
                qualname = f"{ext.namespace}::{fn.name}"
                table = _SEEN.get(qualname)
                if table is None:
                    table = _SEEN[qualname] = {}
                    torch.library.register_fake(qualname, _fake(fn.name, table), lib=_library(ext.namespace))
                table.update(fn.seen)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def _key(args: tuple, kwargs: dict) -> tuple:
    """A call's structure, tensors' dtypes, shapes and device types, and other values; a number as a float
    (the operator's schema may have turned the int the eager call passed into a double)."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    return (str(spec), tuple(_leaf_key(t) for t in leaves))


def _leaf_key(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        return (t.dtype, tuple(int(s) for s in t.shape), t.device.type)
    if isinstance(t, (int, float, torch.SymInt, torch.SymFloat)) and not isinstance(t, bool):
        return float(t)
    return repr(t)


_SEEN: dict[str, dict[tuple, Observed]] = {}  # operator -> what its function returned, per kind of call


def _fake(name: str, seen_calls: dict[tuple, Observed]):
    def fake(*args: Any, **kwargs: Any) -> Any:
        try:
            key = _key(args, kwargs)
        except Exception:  # a size that is not a number: no rule
            key = None
        seen = seen_calls.get(key) if key is not None else None
        if seen is None:
            raise NotImplementedError(
                f"kernelfix: the extension function {name} was not seen called like this when load_best checked the kernel "
                "(only the captured calls' shapes have a rule); load the kernel with load_best(..., trace=False)"
            )
        device = next(
            (t.device for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)), torch.device("cpu")
        )
        return pytree.tree_unflatten(
            [None if m is None else torch.empty(m[0], dtype=m[1], device=device) for m in seen.outputs], seen.spec
        )

    return fake


_LIBRARIES: dict[str, torch.library.Library] = {}


def _library(namespace: str) -> torch.library.Library:
    """A Python handle on the C++ library, to hang the fake implementations on (kept for the process)."""
    if namespace not in _LIBRARIES:
        _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return _LIBRARIES[namespace]


def _proxy(ext_module: Any, ext: Extension, recorder: Recorder) -> types.ModuleType:
    """The module the candidate gets: its functions through :func:`_dispatcher`, anything else its own."""
    proxy = types.ModuleType(getattr(ext_module, "__name__", ext.name))
    proxy.__dict__["__getattr__"] = lambda attr: getattr(ext_module, attr)
    for fn in ext.functions.values():
        setattr(proxy, fn.name, _dispatcher(fn, recorder) if fn.op is not None else fn.pybind)
    return proxy


def _dispatcher(fn: ExtensionFunction, recorder: Recorder) -> Any:
    pybind, op = fn.pybind, fn.op

    def call(*args: Any, **kwargs: Any) -> Any:
        # traced: the operator, on the contiguous tensors its rule was made from. `is_compiling` and `Tensor` as
        # names of this module: reading them through `torch` gives the torch module a second source beside
        # best.py's, which costs a guard evaluated in Python on every compiled call (capture/captured_kernel.py).
        if is_compiling():
            return op(*[_contiguous(a) for a in args], **kwargs)
        if recorder.on:
            return recorder.record(fn, args, kwargs)
        return pybind(*args, **kwargs)

    call.__name__ = call.__qualname__ = fn.name
    return call


def _contiguous(a: Any) -> Any:
    if isinstance(a, Tensor):
        return a.contiguous()
    if isinstance(a, (list, tuple)):
        return type(a)(x.contiguous() if isinstance(x, Tensor) else x for x in a)
    return a


@contextlib.contextmanager
def registering() -> Iterator[Recorder]:
    """While the body imports best.py, its load_inline calls also register their functions as operators."""
    import torch.utils.cpp_extension as cpp_extension

    recorder = Recorder()
    real = cpp_extension.load_inline

    def load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
        functions = kwargs.get("functions")
        if isinstance(functions, str):
            functions = [functions]
        names = list(functions) if isinstance(functions, (list, tuple, dict)) else []
        ext = Extension(name=str(name))
        recorder.extensions.append(ext)
        if not names or kwargs.get("is_python_module", True) is False or args:
            ext.error = f"extension {name}: load_inline without `functions=` (or with positional options): its functions stay pybind"
            return real(name, cpp_sources, cuda_sources, *args, **kwargs)
        if not all(isinstance(n, str) and _IDENTIFIER.match(n) for n in names):
            ext.error = f"extension {name}: a function name that is not a C++ identifier"
            return real(name, cpp_sources, cuda_sources, *args, **kwargs)
        sources = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources)
        digest = hashlib.sha256(repr((name, sources, cuda_sources, names)).encode()).hexdigest()[:12]
        ext.namespace = f"kernelfix_{digest}"
        defs = "\n".join(
            f'  try {{ m.def("{n}", torch::dispatch(c10::DispatchKey::CUDA, &kernelfix_ops::op<&{n}>::call));\n'
            f'        m.impl("{n}", torch::dispatch(c10::DispatchKey::CPU, &kernelfix_ops::op<&{n}>::call)); }} catch (const std::exception&) {{}}'
            for n in names
        )
        try:
            module = real(name, [*sources, REGISTRATION.format(ns=ext.namespace, defs=defs)], cuda_sources, **kwargs)
        except Exception as e:  # noqa: BLE001 - whatever our lines did to the build, the candidate's own sources decide
            ext.error = f"extension {name}: its functions could not be registered as operators ({_build_error(e)})"
            return real(name, cpp_sources, cuda_sources, **kwargs)
        library = getattr(torch.ops, ext.namespace)
        missing = [n for n in names if not hasattr(library, n)]
        if missing:
            ext.error = f"extension {name}: no operator schema for the C++ signature of {', '.join(missing)}"
        for n in names:
            ext.functions[n] = ExtensionFunction(n, getattr(module, n), None if n in missing else getattr(library, n))
        return _proxy(module, ext, recorder)

    cpp_extension.load_inline = load_inline
    try:
        yield recorder
    finally:
        cpp_extension.load_inline = real


def _build_error(e: Exception) -> str:
    """The compiler's first error line, else the exception's last line."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    first = next(
        (ln for ln in lines if " error" in ln or ln.startswith("error")), lines[-1] if lines else type(e).__name__
    )
    return first if len(first) <= 240 else first[:237] + "..."


def observe(recorder: Recorder, module: Any, calls: list) -> str | None:
    """Run the kernel eagerly on each check call, then once more with other values, recording what each
    extension function returns; register the fakes. None, or why the kernel cannot be traced."""
    if not recorder.extensions:
        return None
    recorder.on = True
    try:
        with torch.no_grad():
            for second in (False, True):
                recorder.second_run = second
                for c in calls:
                    args, kwargs = (c.args, c.kwargs) if not second else _other_values((c.args, c.kwargs))
                    module(*args, **kwargs)
    finally:
        recorder.on = recorder.second_run = False
    problem = recorder.problem()
    if problem is None:
        recorder.register_fakes()
    return problem


def _other_values(call: tuple) -> tuple:
    gen = torch.Generator(device="cpu").manual_seed(1)

    def other(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.is_contiguous():
            return torch.randn(t.shape, generator=gen, dtype=torch.float32).to(t.device, t.dtype)
        return t

    return pytree.tree_map(other, call)
