"""[judge] Static checks of candidate source: the first layer of legality.

Errors here are decisive (the candidate is not run): tampering with torch, the
judge or the interpreter; try/except fallbacks to torch; side streams and
threads that move work out of the timer's sight; cuBLAS/cuDNN calls in C++
sources. Torch compute calls in the forward path are warnings only: the
runtime record of executed aten ops decides, since dead code computes nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator

from kernelfix.tools import pysource
from kernelfix.tools.config import JudgeConfig
from kernelfix.tools.legality import static_vocabulary as V
from kernelfix.tools.legality.allowlist import make_allowed
from kernelfix.tools.verdict import Category, StaticFinding


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
            if target.startswith("torch.nn.") and target.rsplit(".", 1)[-1] not in V.HARMLESS_NN:
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        out[t.attr] = target
    return out


def _torch_compute_call(call: ast.Call, aliases: _Aliases, allowed: frozenset[str]) -> str | None:
    target = aliases.resolve(_dotted(call.func))
    if target is None:
        return None
    if target.startswith("torch.") and not target.startswith(V.HARMLESS_TORCH_PREFIXES):
        name = target.rsplit(".", 1)[-1]
        if name in V.HARMLESS_TORCH or name in allowed:
            return None
        if target.startswith("torch.nn.") and not target.startswith("torch.nn.functional."):
            return None if name in V.HARMLESS_NN else target
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
                        f.attr in V.COMPUTE_METHODS
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
                and f.attr in V.SYNC_METHODS
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
                    if (node.module == "sys" and a.name in V.SYS_ATTRS) or (
                        node.module != "sys" and V.os_tamper(a.name)
                    ):
                        error("tampering", Category.TAMPERING, f"imports {node.module}.{a.name}", node.lineno)
            for m in mods:
                top = m.split(".")[0]
                if top in V.TAMPER_MODULES:
                    error("tampering", Category.TAMPERING, f"imports {V.TAMPER_MODULES[top]}", node.lineno)
                elif top in V.THREAD_MODULES and not config.allow_streams:
                    error(
                        "threads",
                        Category.THREADS,
                        f"imports {m}: work on other threads escapes the timer",
                        node.lineno,
                    )
                elif V.TORCH_PRIVATE.match(m):
                    error("tampering", Category.TAMPERING, f"imports {m} (the judge's instrumentation)", node.lineno)
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name in V.TAMPER_CALLS:
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
                and target.rsplit(".", 1)[-1] in V.STREAM_ATTRS
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
                if d.startswith("sys.") and d.split(".")[1] in V.SYS_ATTRS:
                    error("tampering", Category.TAMPERING, f"uses {d}", node.lineno)
                elif d.startswith(("os.", "posix.")) and V.os_tamper(d.split(".")[1]):
                    error("tampering", Category.TAMPERING, f"uses {d}", node.lineno)
                elif V.TORCH_PRIVATE.match(d):
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
        if not config.allow_libraries and (m := V.CXX_LIBRARY.search(text)):
            error(
                "library",
                Category.DISALLOWED_LIBRARY,
                f"C++ source calls {m.group(0)}: write the kernel instead of calling a vendor library",
                line,
            )
        if not config.allow_streams and (m := V.CXX_STREAM.search(text)):
            error(
                "side_stream",
                Category.SIDE_STREAM,
                f"C++ source uses {m.group(0)}: launch on the current stream (at::cuda::getCurrentCUDAStream())",
                line,
            )
        if not config.allow_streams and (m := V.CXX_THREAD.search(text)):
            error("threads", Category.THREADS, f"C++ source uses {m.group(0)}", line)
        if m := V.CXX_DISPATCH.search(text):
            error(
                "tampering", Category.TAMPERING, f"C++ source uses {m.group(0)} (steering around the dispatcher)", line
            )
        for m in V.CXX_ATEN.finditer(text):
            if m.group(1) not in allowed and not m.group(1)[0].isupper():
                warn(
                    "cxx_torch_op",
                    f"C++ source calls {m.group(0).rstrip('(').strip()}: a torch op, not a custom kernel",
                    line,
                )
        if m := V.CXX_SYNC.search(text):
            call = m.group(1) or m.group(2)
            warn("host_sync", f"C++ source calls {call}(): {V.SYNC_FIX}", line)

    # --- the forward path ------------------------------------------------------------------
    path = _forward_path(tree)
    nn_mods = _nn_submodules(tree, aliases)
    for line, what in _calls_torch_compute(path, aliases, allowed, nn_mods):
        warn("torch_op", f"forward path calls {what}", line)
    for line, what in _host_syncs(path, aliases):
        warn("host_sync", f"forward path calls {what}: {V.SYNC_FIX}", line)
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
