"""[candidate worker, one-shot child] Read the build.ninja torch's cpp_extension writes: its edges with their commands expanded.

Only the subset torch emits is understood (variables, rules, build and default
lines); anything else returns None and the caller runs real ninja.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_VAR = re.compile(r"\$(\$|:| |\{[A-Za-z0-9_.-]+\}|[A-Za-z0-9_-]+)")


class Unsupported(Exception):
    pass


@dataclass
class Edge:
    rule: str
    outputs: list[str]
    inputs: list[str]
    command: str = ""
    vars: dict[str, str] = field(default_factory=dict)


def _expand(value: str, scope: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        tok = m.group(1)
        if tok in ("$", ":", " "):
            return tok
        name = tok.strip("{}")
        return scope.get(name, "")

    return _VAR.sub(sub, value)


def _split_paths(text: str) -> list[str]:
    """Paths separated by unescaped spaces ('$ ' is a space inside a path)."""
    out, cur, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "$" and i + 1 < len(text) and text[i + 1] in " :$":
            cur.append(text[i + 1])
            i += 2
            continue
        if c == " ":
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            if c in "|":
                raise Unsupported("implicit or order-only dependencies")
            cur.append(c)
        i += 1
    if cur:
        out.append("".join(cur))
    return out


def parse(text: str) -> tuple[list[Edge], list[str]] | None:
    try:
        return _parse(text)
    except Unsupported:
        return None


def _parse(text: str) -> tuple[list[Edge], list[str]]:
    glob: dict[str, str] = {}
    rules: dict[str, dict[str, str]] = {}
    edges: list[Edge] = []
    defaults: list[str] = []
    current: dict[str, str] | None = None
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw.endswith("$"):
            raise Unsupported("line continuation")
        if raw.startswith((" ", "\t")):
            if current is None:
                raise Unsupported("indented line outside a rule or build")
            k, sep, v = raw.strip().partition("=")
            if not sep:
                raise Unsupported(raw)
            current[k.strip()] = v.strip()
            continue
        if raw.startswith("rule "):
            current = rules.setdefault(raw[5:].strip(), {})
            continue
        if raw.startswith("build "):
            head, sep, rest = raw[6:].partition(": ")
            if not sep:
                raise Unsupported(raw)
            rule, _, ins = rest.strip().partition(" ")
            edge = Edge(rule=rule, outputs=_split_paths(head), inputs=_split_paths(ins.strip()))
            edges.append(edge)
            current = edge.vars
            continue
        if raw.startswith("default "):
            defaults += _split_paths(raw[8:].strip())
            current = None
            continue
        if raw.startswith(("pool ", "include ", "subninja ")):
            raise Unsupported(raw.split()[0])
        k, sep, v = raw.partition("=")
        if not sep:
            raise Unsupported(raw)
        glob[k.strip()] = _expand(v.strip(), glob)
        current = None
    for e in edges:
        rule = rules.get(e.rule)
        if rule is None or "command" not in rule:
            raise Unsupported(f"unknown rule {e.rule}")
        scope = {
            **glob,
            **{k: _expand(v, glob) for k, v in e.vars.items()},
            "in": " ".join(e.inputs),
            "out": " ".join(e.outputs),
        }
        e.command = _expand(rule["command"], scope)
    return edges, defaults
