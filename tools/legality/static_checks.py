"""[judge] Static checks of candidate source: the first layer of legality.

Errors here are decisive (the candidate is not run): tampering with torch, the
judge or the interpreter; try/except fallbacks to torch; side streams and
threads that move work out of the timer's sight; cuBLAS/cuDNN calls in C++
sources. Torch compute calls in the forward path are warnings only: the
runtime record of executed aten ops decides, since dead code computes nothing.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

from kernelfix.tools import pysource
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.legality.allowlist import make_allowed
from kernelfix.tools.verdict import Category, StaticFinding

# Modules whose import alone means the candidate reaches for the judge, the interpreter or the OS.
_TAMPER_MODULES = {
    "ctypes": "ctypes (raw memory access)",
    "gc": "gc (reaching other objects in the process)",
    "inspect": "inspect (reading the judge's frames)",
    "importlib": "importlib (loading or reloading modules behind the judge's back)",
    "builtins": "builtins (replacing built-in functions)",
    "kernelfix": "kernelfix (the judge itself)",
    "signal": "signal (signal handlers)",
    "socket": "socket (network access)",
    "subprocess": "subprocess (running other programs)",
    "pickle": "pickle",
    "marshal": "marshal",
    "__main__": "__main__ (the judge's harness)",
}
_THREAD_MODULES = {"threading", "multiprocessing", "concurrent", "asyncio", "_thread"}
_TAMPER_CALLS = {"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint"}
_SYS_ATTRS = {"modules", "_getframe", "settrace", "setprofile", "meta_path", "path_hooks", "addaudithook"}
_OS_ATTRS = {
    "kill",
    "killpg",
    "getppid",
    "fork",
    "forkpty",
    "setsid",
    "setpgid",
    "system",
    "popen",
    "dup2",
    "pidfd_open",
    "register_at_fork",
}
_OS_PREFIXES = ("exec", "spawn", "posix_spawn")  # execv, execlpe, spawnvp, posix_spawnp, ...


def _os_tamper(name: str) -> bool:
    return name in _OS_ATTRS or name.startswith(_OS_PREFIXES)


_TORCH_PRIVATE = re.compile(
    r"^torch\.(_C|_dynamo|_inductor|overrides|profiler|autograd\.profiler|utils\._python_dispatch|_subclasses|fx)\b"
)
_STREAM_ATTRS = {"Stream", "stream", "ExternalStream", "StreamContext", "set_stream"}

# torch.* callables that compute nothing (allocation, metadata, context managers, dtypes).
_HARMLESS_TORCH = {
    "empty",
    "empty_like",
    "empty_strided",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "arange",
    "tensor",
    "as_tensor",
    "from_numpy",
    "device",
    "dtype",
    "Size",
    "manual_seed",
    "no_grad",
    "inference_mode",
    "is_tensor",
    "numel",
    "get_default_dtype",
    "set_grad_enabled",
    "is_floating_point",
    "promote_types",
    "result_type",
    "finfo",
    "iinfo",
    "broadcast_shapes",
    "Generator",
    "Tensor",
    "randn",
    "rand",
    "randint",
    "cdiv",
    "is_grad_enabled",
    "enable_grad",
}
_HARMLESS_TORCH_PREFIXES = (
    "torch.cuda.",
    "torch.utils.cpp_extension.",
    "torch.ops.",
    "torch.nn.Parameter",
    "torch.nn.init.",
    "torch.backends.",
    "torch.Tensor",
)
_HARMLESS_NN = {
    "Parameter",
    "ParameterList",
    "ParameterDict",
    "ModuleList",
    "ModuleDict",
    "Identity",
    "Module",
    "Buffer",
}
# Tensor methods that compute (called on any object in the forward path: a warning).
_COMPUTE_METHODS = set(
    """sum mean max min amax amin softmax log_softmax exp log matmul mm bmm relu sigmoid tanh add mul sub
    div pow sqrt rsqrt norm var std cumsum cumprod prod clamp clamp_ abs neg argmax argmin topk sort
    gelu silu addmm baddbmm einsum conv2d conv1d conv3d logsumexp erf sin cos maximum minimum where
    add_ mul_ sub_ div_ relu_ masked_fill lerp dot outer addcmul addcdiv""".split()
)
_CXX_ATEN = re.compile(
    r"\b(?:at|torch)::(?!cuda\b|Tensor\b|kFloat|kHalf|kBFloat16|kInt|kLong|kCUDA|kCPU|ScalarType|TensorOptions|Device|IntArrayRef|Scalar\b|dtype\b|indexing\b|nn\b)(\w+)\s*\("
)
# C++ that steps around the dispatcher's Python key would hide its aten calls from the op recorder.
_CXX_DISPATCH = re.compile(
    r"\b(ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|AutoDispatchBelow\w*|DispatchKeySet|_DisableTorchDispatch|RecordFunctionGuard|enableRecordFunction|tls_set_dispatch_key\w*)\b"
)
_CXX_LIBRARY = re.compile(r"\b(cublas\w*|cudnn\w*|cublasLt\w*|at::cuda::blas)\b|#include\s*[<\"](cublas|cudnn)")
_CXX_STREAM = re.compile(r"\b(cudaStreamCreate\w*|getStreamFromPool|cudaStreamBeginCapture)\b")
_CXX_THREAD = re.compile(r"\b(std::thread|std::async|pthread_create|std::jthread)\b")
# Host syncs: the host waits for the GPU, which then idles until the next launch (tools/profile/host_sync.py
# finds them at run time too). Tensor methods, torch calls, and their C++ forms.
_SYNC_METHODS = {"item", "cpu", "tolist", "numpy", "synchronize"}
_CXX_SYNC = re.compile(
    r"\b(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpy(?!Async|ToSymbolAsync|FromSymbolAsync)\w*)\s*\(|\.(item<\w+>|cpu)\(\)"
)
_SYNC_FIX = (
    "it makes the host wait for the GPU (a host sync) and the GPU idle until the next launch: keep the value on the GPU "
    "(pass the tensor to the next kernel and read it there) and let the stream order the kernels"
)


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Aliases:
    """What each imported name stands for: ``F`` -> ``torch.nn.functional``."""

    def __init__(self, tree: ast.Module):
        self.map: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.map[a.asname] = a.name
                    else:
                        top = a.name.split(".")[0]
                        self.map[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    self.map[a.asname or a.name] = f"{node.module}.{a.name}"

    def resolve(self, dotted: str | None) -> str | None:
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.map:
            full = self.map[head]
            return f"{full}.{rest}" if rest else full
        return dotted

    def is_module_root(self, name: str) -> bool:
        return name in self.map


def _string_constants(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 20:
            yield node.lineno, node.value


def _forward_path(tree: ast.Module) -> list[ast.AST]:
    """ModelNew.forward and the module functions and ModelNew methods it calls, transitively."""
    funcs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    methods = {}
    if cls is not None:
        methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    start = methods.get("forward")
    if start is None:
        return []
    seen: dict[int, ast.AST] = {}
    todo = [start]
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen[id(fn)] = fn
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Name) and node.func.id in funcs:
                todo.append(funcs[node.func.id])
            elif (
                isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
                and node.func.attr in methods
            ):
                todo.append(methods[node.func.attr])
    return list(seen.values())


def _nn_submodules(tree: ast.Module, aliases: _Aliases) -> dict[str, str]:
    """``self.NAME = nn.Conv2d(...)`` in ModelNew: NAME -> torch.nn.Conv2d."""
    out = {}
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    if cls is None:
        return out
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target = aliases.resolve(_dotted(node.value.func)) or ""
            if target.startswith("torch.nn.") and target.rsplit(".", 1)[-1] not in _HARMLESS_NN:
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        out[t.attr] = target
    return out


def _torch_compute_call(call: ast.Call, aliases: _Aliases, allowed: frozenset[str]) -> str | None:
    target = aliases.resolve(_dotted(call.func))
    if target is None:
        return None
    if target.startswith("torch.") and not target.startswith(_HARMLESS_TORCH_PREFIXES):
        name = target.rsplit(".", 1)[-1]
        if name in _HARMLESS_TORCH or name in allowed:
            return None
        if target.startswith("torch.nn.") and not target.startswith("torch.nn.functional."):
            return None if name in _HARMLESS_NN else target
        return target
    return None


def _calls_torch_compute(
    nodes: Iterable[ast.AST], aliases: _Aliases, allowed: frozenset[str], nn_mods: dict[str, str]
) -> list[tuple[int, str]]:
    hits = []
    for root in nodes:
        for node in ast.walk(root):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                if "matmul" not in allowed:
                    hits.append((node.lineno, "the @ operator (torch.matmul)"))
            elif isinstance(node, ast.Call):
                t = _torch_compute_call(node, aliases, allowed)
                if t:
                    hits.append((node.lineno, t))
                    continue
                f = node.func
                if isinstance(f, ast.Attribute):
                    if isinstance(f.value, ast.Name) and f.value.id == "self" and f.attr in nn_mods:
                        if (
                            nn_mods[f.attr].rsplit(".", 1)[-1].lower() not in allowed
                        ):  # nn.Linear where linear is allowed
                            hits.append((node.lineno, f"self.{f.attr} ({nn_mods[f.attr]})"))
                    elif (
                        f.attr in _COMPUTE_METHODS
                        and f.attr not in allowed
                        and not aliases.is_module_root(_dotted(f.value) or "")
                    ):
                        hits.append((node.lineno, f".{f.attr}()"))
                elif isinstance(f, ast.Name) and f.id == "super":
                    pass
            elif isinstance(node, ast.Attribute) and node.attr == "forward" and isinstance(node.value, ast.Call):
                if isinstance(node.value.func, ast.Name) and node.value.func.id == "super":
                    hits.append((node.lineno, "super().forward (the reference)"))
    return hits


def _host_syncs(nodes: Iterable[ast.AST], aliases: _Aliases) -> list[tuple[int, str]]:
    """Calls in the forward path that synchronize the host with the GPU: ``.item()``, ``.cpu()``,
    ``.tolist()``, ``.numpy()``, ``.to("cpu")``, ``torch.cuda.synchronize()``, ``<stream or event>.synchronize()``."""
    hits = []
    for root in nodes:
        for node in ast.walk(root):
            if not isinstance(node, ast.Call):
                continue
            target = aliases.resolve(_dotted(node.func)) or ""
            f = node.func
            if target == "torch.cuda.synchronize":
                hits.append((node.lineno, "torch.cuda.synchronize()"))
            elif (
                isinstance(f, ast.Attribute)
                and f.attr in _SYNC_METHODS
                and not aliases.is_module_root(_dotted(f.value) or "")
            ):
                hits.append((node.lineno, f".{f.attr}()"))
            elif (
                isinstance(f, ast.Attribute)
                and f.attr == "to"
                and any(
                    isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("cpu")
                    for a in [*node.args, *(k.value for k in node.keywords if k.arg == "device")]
                )
            ):
                hits.append((node.lineno, '.to("cpu")'))
    return hits


def check(code: str, config: JudgeConfig | None = None) -> list[StaticFinding]:
    """All findings for one candidate source (which must parse)."""
    config = config or JudgeConfig()
    tree = pysource.parse(code)
    aliases = _Aliases(tree)
    allowed = make_allowed(config.extra_allowed_ops, config.removed_allowed_ops)
    findings: list[StaticFinding] = []

    def error(rule: str, cat: Category, msg: str, line: int | None) -> None:
        findings.append(StaticFinding(rule=rule, message=msg, line=line, severity="error", category=cat))

    def warn(rule: str, msg: str, line: int | None) -> None:
        findings.append(StaticFinding(rule=rule, message=msg, line=line, severity="warning"))

    # --- tampering, threads: anywhere in the module -------------------------------------
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            else:
                mods = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.module in ("os", "sys", "posix"):
                for a in node.names:
                    if (node.module == "sys" and a.name in _SYS_ATTRS) or (node.module != "sys" and _os_tamper(a.name)):
                        error("tampering", Category.TAMPERING, f"imports {node.module}.{a.name}", node.lineno)
            for m in mods:
                top = m.split(".")[0]
                if top in _TAMPER_MODULES:
                    error("tampering", Category.TAMPERING, f"imports {_TAMPER_MODULES[top]}", node.lineno)
                elif top in _THREAD_MODULES and not config.allow_streams:
                    error(
                        "threads",
                        Category.THREADS,
                        f"imports {m}: work on other threads escapes the timer",
                        node.lineno,
                    )
                elif _TORCH_PRIVATE.match(m):
                    error("tampering", Category.TAMPERING, f"imports {m} (the judge's instrumentation)", node.lineno)
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name in _TAMPER_CALLS:
                error("tampering", Category.TAMPERING, f"calls {name}()", node.lineno)
            elif name in ("setattr", "delattr") and node.args:
                root = _dotted(node.args[0])
                if root and aliases.is_module_root(root.split(".")[0]):
                    error("tampering", Category.TAMPERING, f"{name}() on module {aliases.resolve(root)}", node.lineno)
            elif name == "getattr" and len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
                root = _dotted(node.args[0])
                if root and aliases.is_module_root(root.split(".")[0]):
                    error(
                        "tampering",
                        Category.TAMPERING,
                        f"getattr() on module {aliases.resolve(root)} with a computed name",
                        node.lineno,
                    )
            target = aliases.resolve(_dotted(node.func)) or ""
            if (
                target.startswith("torch.cuda.")
                and target.rsplit(".", 1)[-1] in _STREAM_ATTRS
                and not config.allow_streams
            ):
                error(
                    "side_stream",
                    Category.SIDE_STREAM,
                    f"{target}(): work on a side stream escapes the timer",
                    node.lineno,
                )
            if target in ("torch.compile", "torch.jit.script", "torch.jit.trace"):
                error(
                    "torch_compile",
                    Category.DISALLOWED_ATEN,
                    f"{target}(): kernels generated by torch from torch ops are not the candidate's own",
                    node.lineno,
                )
            if target == "torch.Stream" and not config.allow_streams:
                error(
                    "side_stream",
                    Category.SIDE_STREAM,
                    "torch.Stream(): work on a side stream escapes the timer",
                    node.lineno,
                )
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                d = _dotted(t) if isinstance(t, ast.Attribute) else None
                if d and aliases.is_module_root(d.split(".")[0]):
                    error(
                        "tampering",
                        Category.TAMPERING,
                        f"assigns to {aliases.resolve(d)} (monkeypatching)",
                        node.lineno,
                    )
        elif isinstance(node, ast.Attribute):
            d = aliases.resolve(_dotted(node))
            if d:
                if d.startswith("sys.") and d.split(".")[1] in _SYS_ATTRS:
                    error("tampering", Category.TAMPERING, f"uses {d}", node.lineno)
                elif d.startswith(("os.", "posix.")) and _os_tamper(d.split(".")[1]):
                    error("tampering", Category.TAMPERING, f"uses {d}", node.lineno)
                elif _TORCH_PRIVATE.match(d):
                    error(
                        "tampering", Category.TAMPERING, f"uses {d} (torch internals the judge relies on)", node.lineno
                    )
            if node.attr in (
                "__globals__",
                "__code__",
                "__closure__",
                "__builtins__",
                "__subclasses__",
                "f_back",
                "f_globals",
                "f_locals",
            ):
                error("tampering", Category.TAMPERING, f"uses .{node.attr} (reaching into other code)", node.lineno)
            elif node.attr == "__dict__" and aliases.is_module_root((_dotted(node.value) or "").split(".")[0]):
                error(
                    "tampering",
                    Category.TAMPERING,
                    f"uses {aliases.resolve(_dotted(node))} (monkeypatching a module)",
                    node.lineno,
                )
        elif isinstance(node, ast.Name) and node.id == "__builtins__":
            error("tampering", Category.TAMPERING, "uses __builtins__", node.lineno)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in (
            "__torch_function__",
            "__torch_dispatch__",
        ):
            error("tampering", Category.TAMPERING, f"defines {node.name} (intercepting torch)", node.lineno)

    # --- C++/CUDA sources (string constants) ---------------------------------------------
    for line, text in _string_constants(tree):
        if not config.allow_libraries and (m := _CXX_LIBRARY.search(text)):
            error(
                "library",
                Category.DISALLOWED_LIBRARY,
                f"C++ source calls {m.group(0)}: write the kernel instead of calling a vendor library",
                line,
            )
        if not config.allow_streams and (m := _CXX_STREAM.search(text)):
            error(
                "side_stream",
                Category.SIDE_STREAM,
                f"C++ source uses {m.group(0)}: launch on the current stream (at::cuda::getCurrentCUDAStream())",
                line,
            )
        if not config.allow_streams and (m := _CXX_THREAD.search(text)):
            error("threads", Category.THREADS, f"C++ source uses {m.group(0)}", line)
        if m := _CXX_DISPATCH.search(text):
            error(
                "tampering", Category.TAMPERING, f"C++ source uses {m.group(0)} (steering around the dispatcher)", line
            )
        for m in _CXX_ATEN.finditer(text):
            if m.group(1) not in allowed and not m.group(1)[0].isupper():
                warn(
                    "cxx_torch_op",
                    f"C++ source calls {m.group(0).rstrip('(').strip()}: a torch op, not a custom kernel",
                    line,
                )
        if m := _CXX_SYNC.search(text):
            call = m.group(1) or m.group(2)
            warn("host_sync", f"C++ source calls {call}(): {_SYNC_FIX}", line)

    # --- the forward path ------------------------------------------------------------------
    path = _forward_path(tree)
    nn_mods = _nn_submodules(tree, aliases)
    for line, what in _calls_torch_compute(path, aliases, allowed, nn_mods):
        warn("torch_op", f"forward path calls {what}", line)
    for line, what in _host_syncs(path, aliases):
        warn("host_sync", f"forward path calls {what}: {_SYNC_FIX}", line)
    for fn in path:
        for node in ast.walk(fn):
            if isinstance(node, ast.Try):
                handlers = [h for h in node.handlers] + (
                    [ast.Module(body=node.orelse, type_ignores=[])] if node.orelse else []
                )
                hits = _calls_torch_compute(handlers, aliases, allowed, nn_mods)
                if hits:
                    error(
                        "fallback",
                        Category.FALLBACK,
                        f"try/except falls back to torch ({hits[0][1]}, line {hits[0][0]}): a failing kernel must fail, not hide behind the reference",
                        node.lineno,
                    )
    # one message per rule and line is enough
    unique: dict[tuple[str, int | None, str], StaticFinding] = {}
    for f in findings:
        unique.setdefault((f.rule, f.line, f.message), f)
    return list(unique.values())


def errors(findings: Iterable[StaticFinding]) -> list[StaticFinding]:
    return [f for f in findings if f.severity == "error"]
