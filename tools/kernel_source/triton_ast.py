"""[judge] The ``@triton.jit`` kernels of a candidate, walked on Python's AST as ``cuda_text`` walks CUDA: what each
name depends on (``tl.program_id(axis)``, ``tl.arange`` lanes, ``tl.load``ed data), which conditions let one program
through (``if pid == 0:``), and two kinds of site: a read-modify-write of global memory without an atomic
(``tl.store(p, tl.load(p) + v)``, or the load kept in a name first) and atomic calls (``tl.atomic_add`` and the
rest), with what their address depends on and whether their returned value goes on to address memory."""

from __future__ import annotations

import ast

from kernelfix.tools import pysource
from kernelfix.tools.kernel_source import deps as D
from kernelfix.tools.kernel_source.cuda_text import Kernel, Site

_HI = (ast.FloorDiv, ast.Div, ast.RShift)
_LO = (ast.Mod, ast.BitAnd)
CLAIMED = "claimed"


def _is_jit(fn: ast.FunctionDef) -> bool:
    for d in fn.decorator_list:
        node = d.func if isinstance(d, ast.Call) else d
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
        if name == "jit":
            return True
    return False


def _call(node: ast.AST) -> str | None:
    """``tl.load`` -> "load", ``triton.language.atomic_add`` -> "atomic_add", for calls through any module alias."""
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    return None


def kernels(source: str) -> list[Kernel]:
    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and _is_jit(node):
            k = Kernel(name=node.name, line=node.lineno)
            _Walk(k).body(node.body, {})
            last = {
                (site.kind, site.line, site.target): site for site in k.sites
            }  # a loop's body is walked twice: its second reading
            k.sites = list(last.values())
            out.append(k)
    return out


class _Walk:
    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.env: dict[str, D.Dep] = {}
        self.loaded: dict[str, str] = {}  # name -> the pointer expression (ast.dump) its value was tl.load-ed from
        self.counters: list[Site] = []

    def deps(self, node: ast.AST | None) -> D.Dep:
        if node is None:
            return {}
        if isinstance(node, ast.Name):
            return dict(self.env.get(node.id, {}))
        if isinstance(node, ast.BinOp):
            left, right = self.deps(node.left), self.deps(node.right)
            if isinstance(node.op, _HI):
                return D.union(D.part(left, D.HI), right)
            if isinstance(node.op, _LO):
                return D.union(D.part(left, D.LO), right)
            return D.union(left, right)
        if isinstance(node, ast.Call):
            name = _call(node)
            if name == "program_id":
                axis = node.args[0] if node.args else next((kw.value for kw in node.keywords if kw.arg == "axis"), None)
                n = axis.value if isinstance(axis, ast.Constant) and isinstance(axis.value, int) else 0
                source = D.PROGRAM[min(max(n, 0), 2)]
                self.k.used.add(source)
                return D.of(source)
            if name == "arange":
                return D.of(D.LANE)
            args = [self.deps(a) for a in node.args] + [self.deps(kw.value) for kw in node.keywords]
            if name == "load":
                if node.args:
                    self._indexed(self.deps(node.args[0]))
                return D.of(D.DATA)
            if name and name.startswith("atomic_"):
                return D.of(CLAIMED)
            if name in ("zeros", "full", "empty", "num_programs", "cdiv"):
                return {}
            method_of = (
                self.deps(node.func.value) if isinstance(node.func, ast.Attribute) else {}
            )  # x.to(tl.int32): x's
            return D.union(method_of, *args)
        if isinstance(node, ast.Subscript):  # x[:, None]: the same values, another shape
            return self.deps(node.value)
        if isinstance(node, (ast.UnaryOp,)):
            return self.deps(node.operand)
        if isinstance(node, ast.IfExp):
            return D.union(self.deps(node.body), self.deps(node.orelse), self.deps(node.test))
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            return D.union(*[self.deps(c) for c in ast.iter_child_nodes(node)])
        if isinstance(node, ast.Attribute):  # x.to(...), x.T, x.dtype
            return self.deps(node.value)
        if isinstance(node, (ast.Tuple, ast.List)):
            return D.union(*[self.deps(e) for e in node.elts])
        return {}

    def _indexed(self, index: D.Dep) -> None:
        for key in index:
            if key.startswith(CLAIMED + ":"):
                self.counters[int(key.split(":", 1)[1])].claims_work = True

    def body(self, stmts: list[ast.stmt], pins: D.Dep) -> None:
        for s in stmts:
            self.statement(s, pins)

    def statement(self, s: ast.stmt, pins: D.Dep) -> None:
        if isinstance(s, ast.If):
            self.deps(s.test)
            self.body(s.body, D.union(pins, self._pins(s.test)))
            self.body(s.orelse, pins)
        elif isinstance(s, (ast.For, ast.While)):
            if isinstance(s, ast.For) and isinstance(s.target, ast.Name):
                self.env[s.target.id] = self.deps(s.iter)
            elif isinstance(s, ast.While):
                self.deps(s.test)
            self.body(s.body, pins)
            self.body(s.body, pins)  # twice: a value carried round the loop (acc += ...) reaches its uses
        elif isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            value = s.value
            if value is None:
                return
            targets = s.targets if isinstance(s, ast.Assign) else [s.target]
            claimed = self._sites(
                value, pins, targets[0].id if len(targets) == 1 and isinstance(targets[0], ast.Name) else None
            )
            d = claimed if claimed is not None else self.deps(value)
            source = self._load_source(value)
            for t in targets:
                for name in (
                    [t.id]
                    if isinstance(t, ast.Name)
                    else [e.id for e in getattr(t, "elts", []) if isinstance(e, ast.Name)]
                ):
                    self.env[name] = D.union(self.env.get(name, {}), d) if isinstance(s, ast.AugAssign) else d
                    if source is not None and not isinstance(s, ast.AugAssign):
                        self.loaded[name] = source
                    elif not isinstance(s, ast.AugAssign):
                        self.loaded.pop(name, None)
        elif isinstance(s, ast.Expr):
            self._sites(s.value, pins, None)
            self.deps(s.value)
        elif isinstance(s, ast.With):
            self.body(s.body, pins)

    def _pins(self, test: ast.AST) -> D.Dep:
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        out: D.Dep = {}
        for p in parts:
            if isinstance(p, ast.Compare) and len(p.ops) == 1 and isinstance(p.ops[0], ast.Eq):
                a, b = self.deps(p.left), self.deps(p.comparators[0])
                if not a or not b:
                    out = D.union(out, {k: v for k, v in (a or b).items() if k in D.PROGRAM})
        return out

    def _load_source(self, value: ast.AST) -> str | None:
        """The pointer a value was read from, where it is one ``tl.load`` (maybe inside arithmetic: ``tl.load(p) + v``)."""
        loads = [n for n in ast.walk(value) if _call(n) == "load" and isinstance(n, ast.Call) and n.args]
        return ast.dump(loads[0].args[0]) if len(loads) == 1 else None

    def _sites(self, value: ast.AST, pins: D.Dep, result: str | None) -> D.Dep | None:
        claimed = None
        for node in ast.walk(value):
            name = _call(node)
            if not isinstance(node, ast.Call) or not node.args:
                continue
            ptr = node.args[0]
            if name == "store" and len(node.args) > 1:
                self._indexed(self.deps(ptr))
                written = ast.dump(ptr)
                reads = [
                    n
                    for n in ast.walk(node.args[1])
                    if (_call(n) == "load" and isinstance(n, ast.Call) and n.args and ast.dump(n.args[0]) == written)
                    or (isinstance(n, ast.Name) and self.loaded.get(n.id) == written)
                ]
                if reads:
                    self.k.sites.append(
                        Site(kind="rmw", line=node.lineno, target=ast.unparse(ptr), index=self.deps(ptr), pins=pins)
                    )
            elif name and name.startswith("atomic_"):
                site = Site(
                    kind=f"tl.{name}",
                    line=node.lineno,
                    target=ast.unparse(ptr),
                    index=self.deps(ptr),
                    pins=pins,
                    result=result if node is value else None,
                )
                self.k.sites.append(site)
                if site.result:
                    self.counters.append(site)
                    claimed = D.of(f"{CLAIMED}:{len(self.counters) - 1}")
        return claimed
