"""[judge] The ``__global__`` kernels in a candidate's CUDA C++ (its ``cuda_sources`` strings, read in the candidate's
own file so lines stay its lines), walked statement by statement: what each variable depends on, which pointers
are global memory (the kernel's pointer parameters and pointers computed from them), which conditions let only
one thread through (``if (threadIdx.x == 0)``), and two kinds of site: read-modify-writes of global memory without
an atomic (``p[i] += v``, ``p[i] = p[i] op v``, ``p[i]++``, ``*p += v``) and atomic calls, with what their address
depends on and whether their returned value goes on to index memory (a counter handing out work)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernelfix.tools.kernel_source import deps as D
from kernelfix.tools.kernel_source.cuda_expr import (
    CLAIMED,
    POSITION,
    Tok,
    blank_comments,
    deps,
    is_type_word,
    match,
    split_top,
    text,
    tokens,
)

_COMPOUND = {"+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<=", ">>="}
_BLOCK_WORDS = ("if", "for", "while", "do", "else", "switch")


@dataclass
class Site:
    """A read-modify-write (``kind`` "rmw") or an atomic call (``kind`` the function) at a line of the candidate."""

    kind: str
    line: int
    target: str  # "y[row]", "*out", "&hist[bin]"
    index: D.Dep  # what the address depends on (beyond the pointer's base)
    pins: D.Dep  # the parts of the position the enclosing conditions fix (threadIdx.x == 0)
    result: str | None = None  # an atomic's returned value, when it is kept in a variable
    claims_work: bool = False  # ... and that value then indexes memory


@dataclass
class Kernel:
    name: str
    line: int
    used: set[str] = field(default_factory=set)  # position sources the kernel reads (tx, bx, ...)
    sites: list[Site] = field(default_factory=list)


def kernels(source: str) -> list[Kernel]:
    """Every ``__global__`` function of ``source`` (a candidate's whole file), walked."""
    toks = tokens(blank_comments(source))
    out = []
    for i, t in enumerate(toks):
        if t.text != "__global__":
            continue
        j = i + 1
        while j < len(toks) and (toks[j].text != "(" or toks[j - 1].text == "__launch_bounds__"):
            j = match(toks, j) + 1 if toks[j].text == "(" else j + 1
        if j >= len(toks) or toks[j - 1].kind != "id":
            continue
        close = match(toks, j)
        if close + 1 >= len(toks) or toks[close + 1].text != "{":
            continue
        end = match(toks, close + 1)
        k = Kernel(name=toks[j - 1].text, line=toks[j - 1].line)
        _Walk(k, toks[j + 1 : close]).block(toks[close + 2 : end])
        out.append(k)
    return out


class _Walk:
    def __init__(self, kernel: Kernel, params: list[Tok]):
        self.k = kernel
        self.env: dict[str, D.Dep] = {}
        self.globals: dict[str, D.Dep] = {}  # global pointers: parameters (no offset) and pointers computed from them
        self.counters: list[Site] = []  # atomics whose result was kept, waiting to see it index memory
        self.conditional = (
            0  # inside an if, loop or else: an assignment may not happen, so it adds to the name's dependence
        )
        for p in split_top(params, ","):
            if any(t.text == "*" for t in p) and p and p[-1].kind == "id":
                self.globals[p[-1].text] = {}

    def lookup(self, name: str) -> D.Dep:
        return dict(self.env.get(name, {}))

    def deps(self, toks: list[Tok]) -> D.Dep:
        for a, b in zip(toks, toks[2:]):
            if (a.text, b.text) in POSITION:
                self.k.used.add(POSITION[(a.text, b.text)])
        return deps(toks, self.lookup, self._indexed)

    def _indexed(self, index: D.Dep) -> None:
        """An index evaluated somewhere: one that carries an atomic's returned value makes that atomic a counter."""
        for key in index:
            if key.startswith(CLAIMED + ":"):
                self.counters[int(key.split(":", 1)[1])].claims_work = True

    # -- statements ------------------------------------------------------------------------------------
    def block(self, toks: list[Tok], pins: D.Dep | None = None) -> None:
        i = 0
        while i < len(toks):
            i = self.statement(toks, i, pins or {})

    def statement(self, toks: list[Tok], i: int, pins: D.Dep) -> int:
        t = toks[i]
        if t.text == "{":
            end = match(toks, i)
            self.block(toks[i + 1 : end], pins)
            return end + 1
        if t.text in ("if", "while", "switch", "for", "else", "do"):
            self.conditional += (
                1  # an assignment under a condition adds to what the name held (if (bin == n) bin = n - 1;)
            )
            try:
                return self._control(toks, i, pins)
            finally:
                self.conditional -= 1
        j = i
        depth = 0
        while j < len(toks) and not (toks[j].text == ";" and depth == 0):
            depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(toks[j].text, 0)
            j += 1
        self.simple(toks[i:j], pins)
        return j + 1

    def _control(self, toks: list[Tok], i: int, pins: D.Dep) -> int:
        t = toks[i]
        if t.text in ("if", "while", "switch") and i + 1 < len(toks) and toks[i + 1].text == "(":
            close = match(toks, i + 1)
            cond = toks[i + 2 : close]
            self._assignments_in(cond)
            inner = D.union(pins, self._pins(cond)) if t.text == "if" else pins
            return self.statement(toks, close + 1, inner) if close + 1 < len(toks) else close + 1
        if t.text == "for" and i + 1 < len(toks) and toks[i + 1].text == "(":
            close = match(toks, i + 1)
            parts = split_top(toks[i + 2 : close], ";")
            if parts:
                self.simple(parts[0], pins)
            if len(parts) > 2:
                self.simple(parts[2], pins)
            return self.statement(toks, close + 1, pins) if close + 1 < len(toks) else close + 1
        if t.text in ("else", "do"):
            return self.statement(toks, i + 1, pins) if i + 1 < len(toks) else i + 1
        return (
            self.statement(toks, i + 1, pins) if i + 1 < len(toks) else i + 1
        )  # a control word this walk does not read

    def _pins(self, cond: list[Tok]) -> D.Dep:
        """What ``cond``'s equalities with a constant fix of the thread's position (``tid == 0``, ``!threadIdx.x``)."""
        out: D.Dep = {}
        for part in split_top(cond, "&&"):
            part = [t for t in part if t.text not in ("(", ")")] if all(t.text != "," for t in part) else part
            if part and part[0].text == "!" and len(part) > 1:
                out = D.union(out, self._position(self.deps(part[1:])))
                continue
            sides = [s for s in _split_op(part, "==")]
            if len(sides) == 2:
                a, b = self.deps(sides[0]), self.deps(sides[1])
                if not b or not a:
                    out = D.union(out, self._position(a or b))
        return out

    @staticmethod
    def _position(d: D.Dep) -> D.Dep:
        return {k: v for k, v in d.items() if k in D.THREAD + D.BLOCK}

    def _assignments_in(self, cond: list[Tok]) -> None:
        """``while ((i = atomicAdd(next, 1)) < n)``: the assignment inside a condition."""
        for k in range(len(cond) - 2):
            if cond[k].kind == "id" and cond[k + 1].text == "=" and (k == 0 or cond[k - 1].text in ("(", ",")):
                end = k + 2
                depth = 0
                while end < len(cond) and not (depth == 0 and cond[end].text in (")", ",")):
                    depth += {"(": 1, ")": -1}.get(cond[end].text, 0)
                    end += 1
                self.simple(cond[k:end], {})

    def simple(self, s: list[Tok], pins: D.Dep) -> None:
        if not s or s[0].text in ("return", "break", "continue", "goto", "#", "case", "default"):
            if s and s[0].text == "return":
                self._atomics(s[1:], pins, None)
            return
        if any(t.text == "__shared__" for t in s):
            return  # shared memory: racecheck's, not this reading's
        if is_type_word(s[0]) or (
            len(s) > 2 and s[0].kind == "id" and s[1].kind == "id" and s[0].text not in _BLOCK_WORDS
        ):
            self._declaration(s, pins)
            return
        claimed = self._atomics(s, pins, _assigned(s))
        target, op, rhs = _lvalue(s)
        if target is None:
            return
        name = next((t.text for t in target if t.kind == "id"), "")
        if len(target) == 1 and target[0].kind == "id" and op is not None:
            value = claimed if claimed is not None else self.deps(rhs)
            keep = op != "=" or (self.conditional and claimed is None)
            self.env[name] = D.union(self.env.get(name, {}), value) if keep else value
            return
        if name not in self.globals:
            if op is not None:
                self.deps(rhs)
            return
        index, shown = self._address(target)
        rmw = op in _COMPOUND or op in ("++", "--") or (op == "=" and _reads(rhs, target))
        if op is not None:
            self.deps(rhs)
        if rmw:
            self.k.sites.append(
                Site(
                    kind="rmw",
                    line=target[0].line,
                    target=shown,
                    index=D.union(self.globals.get(name, {}), index),
                    pins=pins,
                )
            )

    def _declaration(self, s: list[Tok], pins: D.Dep) -> None:
        k = 0
        while k < len(s) and (
            is_type_word(s[k])
            or s[k].text in ("*", "&")
            or (s[k].kind == "id" and k + 1 < len(s) and s[k + 1].kind == "id")
        ):
            k += 1
        pointer = any(t.text == "*" for t in s[:k])
        for decl in split_top(s[k:], ","):
            if not decl or decl[0].kind != "id":
                continue
            name = decl[0].text
            if len(decl) > 1 and decl[1].text == "[":
                continue  # a local array: registers or local memory, one thread's own
            rhs = decl[2:] if len(decl) > 2 and decl[1].text == "=" else []
            claimed = self._atomics(rhs, pins, name)
            value = claimed if claimed is not None else self.deps(rhs)
            if self.conditional and name in self.env and claimed is None:
                value = D.union(self.env[name], value)  # a declaration in a loop body, read again on the next pass
            if pointer and any(t.kind == "id" and t.text in self.globals for t in rhs):
                base = next(self.globals[t.text] for t in rhs if t.kind == "id" and t.text in self.globals)
                self.globals[name] = D.union(base, value)
            else:
                self.env[name] = value

    def _address(self, target: list[Tok]) -> tuple[D.Dep, str]:
        """What the written address depends on: the subscript of ``p[i]``, the offset of ``*(p + i)``; with its text."""
        if target[0].text == "*":
            inner = target[1:]
            if inner and inner[0].text == "(":
                inner = inner[1:-1]
            offset = [t for t in inner if not (t.kind == "id" and t.text in self.globals)]
            return self.deps(offset) if offset else {}, text(target)
        index = target[2:-1] if len(target) > 2 and target[1].text == "[" else []
        return self.deps(index), text(target)

    def _atomics(self, s: list[Tok], pins: D.Dep, result: str | None) -> D.Dep | None:
        """Record the atomic calls of a statement; where the statement keeps one's returned value in ``result``, that
        variable's dependence (a key of its own, so a later index that uses it marks this atomic a counter)."""
        claimed = None
        for k, t in enumerate(s):
            if not (t.kind == "id" and t.text.startswith("atomic") and k + 1 < len(s) and s[k + 1].text == "("):
                continue
            close = match(s, k + 1)
            args = split_top(s[k + 2 : close], ",")
            if not args or not args[0]:
                continue
            addr = args[0]
            site = Site(
                kind=t.text,
                line=t.line,
                target=text(addr),
                index=self._atomic_address(addr),
                pins=pins,
                result=result if result else None,
            )
            self.k.sites.append(site)
            if site.result:
                self.counters.append(site)
                claimed = D.of(f"{CLAIMED}:{len(self.counters) - 1}")
        return claimed

    def _atomic_address(self, addr: list[Tok]) -> D.Dep:
        a = [t for t in addr if t.text != "&"] if addr and addr[0].text == "&" else addr
        if len(a) > 2 and a[0].kind == "id" and a[1].text == "[":
            return D.union(self.globals.get(a[0].text, {}), self.deps(a[2 : match(a, 1)]))
        offset = [t for t in a if not (t.kind == "id" and t.text in self.globals)]
        base = next((self.globals[t.text] for t in a if t.kind == "id" and t.text in self.globals), {})
        return D.union(base, self.deps(offset) if offset and any(t.kind in ("id", "num") for t in offset) else {})


def _split_op(toks: list[Tok], op: str) -> list[list[Tok]]:
    return split_top(toks, op)


def _assigned(s: list[Tok]) -> str | None:
    """The variable a statement assigns (``i = atomicAdd(...)``), if it is a plain name."""
    return s[0].text if len(s) > 2 and s[0].kind == "id" and s[1].text == "=" else None


def _lvalue(s: list[Tok]) -> tuple[list[Tok] | None, str | None, list[Tok]]:
    """(target, operator, right-hand side) of an assignment or increment statement; (None, None, []) otherwise."""
    if s[0].text in ("++", "--"):
        return s[1:], "++", []
    depth = 0
    for k, t in enumerate(s):
        if t.text in ("(", "["):
            depth += 1
        elif t.text in (")", "]"):
            depth -= 1
        elif depth == 0 and (t.text == "=" or t.text in _COMPOUND):
            return s[:k], t.text, s[k + 1 :]
        elif depth == 0 and t.text in ("++", "--") and k == len(s) - 1:
            return s[:k], "++", []
    return None, None, []


def _reads(rhs: list[Tok], target: list[Tok]) -> bool:
    """``p[i] = p[i] op v``: the right-hand side reads the element it writes."""
    n = len(target)
    want = [t.text for t in target]
    return any([t.text for t in rhs[k : k + n]] == want for k in range(len(rhs) - n + 1))


def line_text(source: str, line: int) -> str:
    lines = source.splitlines()
    return re.sub(r"\s+", " ", lines[line - 1].strip()) if 0 < line <= len(lines) else ""
