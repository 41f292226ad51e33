"""[judge] CUDA C++ as tokens, and what an expression of a kernel depends on (``deps``): a small precedence parser
over C's operators, enough for index arithmetic. Comments are blanked with their newlines kept, so every token
keeps its line in the candidate's own file."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kernelfix.tools.kernel_source import deps as D

_TOKEN = re.compile(
    r"(?P<id>[A-Za-z_]\w*)|(?P<num>(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)[uUlLfF]*)"
    r"|(?P<op><<=|>>=|->|\+\+|--|\+=|-=|\*=|/=|%=|&=|\|=|\^=|<<|>>|<=|>=|==|!=|&&|\|\||::|[-+*/%&|^~!<>=?:;,.()\[\]{}#])"
)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
TYPE_WORDS = {
    "int",
    "long",
    "short",
    "unsigned",
    "signed",
    "char",
    "float",
    "double",
    "bool",
    "void",
    "const",
    "volatile",
    "auto",
    "size_t",
    "half",
    "__half",
    "__nv_bfloat16",
    "float2",
    "float4",
    "int2",
    "int4",
    "uint",
    "__restrict__",
    "__restrict",
    "register",
    "static",
}
POSITION = {
    ("threadIdx", "x"): "tx",
    ("threadIdx", "y"): "ty",
    ("threadIdx", "z"): "tz",
    ("blockIdx", "x"): "bx",
    ("blockIdx", "y"): "by",
    ("blockIdx", "z"): "bz",
}
CLAIMED = "claimed"  # the value an atomic returned (a counter handing out work)


@dataclass(frozen=True)
class Tok:
    kind: str  # id, num, op (quotes are not read: the scan runs over a Python file whose strings hold the CUDA code)
    text: str
    line: int  # 1-based, in the scanned text


def blank_comments(text: str) -> str:
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def tokens(text: str, first_line: int = 1) -> list[Tok]:
    out, line, pos = [], first_line, 0
    for m in _TOKEN.finditer(text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        kind = m.lastgroup or "op"
        out.append(Tok(kind, m.group(0), line))
    return out


def is_type_word(t: Tok) -> bool:
    return t.kind == "id" and (t.text in TYPE_WORDS or t.text.endswith("_t"))


def strip_casts(toks: list[Tok]) -> list[Tok]:
    """``static_cast<T>(x)`` (and the other named casts) as ``(x)``: the template brackets would read as comparisons."""
    out: list[Tok] = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if (
            t.text in ("static_cast", "reinterpret_cast", "const_cast")
            and i + 1 < len(toks)
            and toks[i + 1].text == "<"
        ):
            depth, j = 0, i + 1
            while j < len(toks):
                depth += {"<": 1, ">": -1, ">>": -2}.get(toks[j].text, 0)
                j += 1
                if depth <= 0:
                    break
            i = j
            continue
        out.append(t)
        i += 1
    return out


_BINARY = {
    "?": 3,
    "||": 4,
    "&&": 5,
    "|": 6,
    "^": 7,
    "&": 8,
    "==": 9,
    "!=": 9,
    "<": 10,
    ">": 10,
    "<=": 10,
    ">=": 10,
    "<<": 11,
    ">>": 11,
    "+": 12,
    "-": 12,
    "*": 13,
    "/": 13,
    "%": 13,
}


class _Parser:
    """Precedence climbing over one expression's tokens; ``lookup`` gives a name's dependence."""

    def __init__(self, toks: list[Tok], lookup: Callable[[str], D.Dep], on_index: Callable[[D.Dep], None] | None):
        self.t, self.i, self.lookup, self.on_index = toks, 0, lookup, on_index

    def peek(self, k: int = 0) -> str | None:
        return self.t[self.i + k].text if self.i + k < len(self.t) else None

    def take(self) -> Tok:
        tok = self.t[self.i]
        self.i += 1
        return tok

    def expr(self, min_prec: int = 0) -> D.Dep:
        left = self.unary()
        while True:
            op = self.peek()
            prec = _BINARY.get(op or "")
            if prec is None or prec < min_prec:
                return left
            self.take()
            if op == "?":
                mid = self.expr(0)
                if self.peek() == ":":
                    self.take()
                left = D.union(left, mid, self.expr(3))
                continue
            right = self.expr(prec + 1)
            if op in ("/", ">>"):
                left = D.union(D.part(left, D.HI), right)
            elif op in ("%", "&"):
                left = D.union(D.part(left, D.LO), right)
            else:
                left = D.union(left, right)

    def unary(self) -> D.Dep:
        op = self.peek()
        if op in ("-", "+", "!", "~", "++", "--", "&"):
            self.take()
            return self.unary()
        if op == "*":  # a dereference reads memory
            self.take()
            self.unary()
            return D.of(D.DATA)
        if op == "(" and self._cast_ahead():
            while self.take().text != ")":
                pass
            return self.unary()
        return self.postfix(self.primary())

    def _cast_ahead(self) -> bool:
        j = self.i + 1
        seen = False
        while j < len(self.t) and self.t[j].text != ")":
            if not (is_type_word(self.t[j]) or self.t[j].text in ("*", "::")):
                return False
            seen = True
            j += 1
        return (
            seen
            and j + 1 < len(self.t)
            and self.t[j + 1].text not in _BINARY
            and self.t[j + 1].text not in (")", ";", ",", "]")
        )

    def primary(self) -> D.Dep:
        if self.peek() is None:
            return {}
        tok = self.take()
        if tok.text == "(":
            inner = self.expr(0)
            if self.peek() == ")":
                self.take()
            return inner
        if tok.kind != "id":
            return {}
        if tok.text in ("threadIdx", "blockIdx") and self.peek() == "." and self.peek(1) in ("x", "y", "z"):
            self.take()
            return D.of(POSITION[(tok.text, self.take().text)])
        if (
            self.peek() == "("
        ):  # a call: __ldg and the atomics read memory, the rest (min, max, casts) pass their arguments on
            self.take()
            args = self._args()
            if tok.text.startswith("__ldg") or tok.text.startswith("atomic"):
                return D.of(CLAIMED if tok.text.startswith("atomic") else D.DATA)
            return D.union(*args)
        return self.lookup(tok.text)

    def _args(self) -> list[D.Dep]:
        args: list[D.Dep] = []
        while self.peek() not in (None, ")"):
            args.append(self.expr(0))
            if self.peek() == ",":
                self.take()
            elif self.peek() not in (None, ")"):
                self.take()  # something this parser does not know: skip it
        if self.peek() == ")":
            self.take()
        return args

    def postfix(self, value: D.Dep) -> D.Dep:
        while self.peek() in ("[", ".", "->", "++", "--"):
            op = self.take().text
            if op == "[":
                index = self.expr(0)
                if self.on_index:
                    self.on_index(index)
                if self.peek() == "]":
                    self.take()
                value = D.of(D.DATA)  # an element read from memory
            elif op in (".", "->"):
                if self.peek() is not None:
                    self.take()
        return value


def deps(
    toks: list[Tok],
    lookup: Mapping[str, D.Dep] | Callable[[str], D.Dep],
    on_index: Callable[[D.Dep], None] | None = None,
) -> D.Dep:
    """What the expression ``toks`` depends on; where it cannot be parsed, every name and position in it, whole."""
    get = lookup if callable(lookup) else (lambda name: dict(lookup.get(name, {})))
    toks = strip_casts(toks)
    try:
        p = _Parser(toks, get, on_index)
        out = p.expr(0)
        if p.i >= len(toks):
            return out
    except (IndexError, RecursionError):
        pass
    found: list[D.Dep] = []
    for k, t in enumerate(toks):
        if t.text in ("threadIdx", "blockIdx") and k + 2 < len(toks) and toks[k + 2].text in ("x", "y", "z"):
            found.append(D.of(POSITION[(t.text, toks[k + 2].text)]))
        elif t.kind == "id":
            found.append(get(t.text))
        elif t.text == "[":
            found.append(D.of(D.DATA))
    return D.union(*found)


def split_top(toks: list[Tok], sep: str) -> list[list[Tok]]:
    """``toks`` split at ``sep`` outside brackets."""
    out: list[list[Tok]] = [[]]
    depth = 0
    for t in toks:
        if t.text in ("(", "[", "{"):
            depth += 1
        elif t.text in (")", "]", "}"):
            depth -= 1
        if t.text == sep and depth == 0:
            out.append([])
        else:
            out[-1].append(t)
    return out


def match(toks: list[Tok], i: int) -> int:
    """The index of the bracket closing the one at ``i``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    open_, close = toks[i].text, pairs[toks[i].text]
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text == open_:
            depth += 1
        elif toks[j].text == close:
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def text(toks: list[Tok]) -> str:
    """Tokens as compact text (``y[row]``, ``blockIdx.x / 4``)."""
    s = " ".join(t.text for t in toks)
    s = re.sub(r"\s*(\.|->)\s*", r"\1", s)
    s = re.sub(r"([(\[])\s+", r"\1", s)
    s = re.sub(r"\s+([)\]])", r"\1", s)
    s = re.sub(r"(\w)\s+([(\[])", r"\1\2", s)
    s = re.sub(r"^([&*]) ", r"\1", s)
    return re.sub(r"\s*,\s*", ", ", s)
