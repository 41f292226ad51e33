"""The judge's modules import one another one way: the judge calls its stages, and nothing it
uses imports it back (issue 23: the stages once imported tools/judge.py for its lease, reference
and workers, a circle of six files). Read from the source with ast, so imports under
TYPE_CHECKING and inside functions count too."""

from __future__ import annotations

import ast
import functools
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools"
JUDGE = "kernelfix.tools.judge"


def _name(path: Path) -> str:
    parts = ["kernelfix", "tools", *path.relative_to(TOOLS).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in TOOLS.rglob("*.py")}


def _imports(name: str, path: Path) -> set[str]:
    """The kernelfix.tools modules ``name`` imports: ``from pkg import mod`` counts as ``pkg.mod``
    alone (a package's __init__ that its own submodule names is no circle)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            subs = {f"{base}.{a.name}" for a in node.names} & MODULES.keys()
            out |= subs or {base}
    return (out & MODULES.keys()) - {name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


@functools.cache
def _reach(start: str) -> frozenset[str]:
    seen, todo = set(), [start]
    while todo:
        for m in GRAPH[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return frozenset(seen)


def test_nothing_the_judge_uses_imports_it_back():
    used = _reach(JUDGE)
    assert {"kernelfix.tools.stages.compile", "kernelfix.tools.stages.correctness", "kernelfix.tools.stages.benchmark"} <= used
    back = sorted(m for m in used if JUDGE in GRAPH[m])
    assert not back, f"imported by the judge and importing it back: {back}"


def test_the_judges_modules_make_no_circle():
    circles = {frozenset(n for n in _reach(m) if m in _reach(n)) for m in GRAPH if m in _reach(m)}
    assert not circles, sorted(sorted(c) for c in circles)


def test_the_build_files_live_in_their_package():
    assert not [p.name for p in TOOLS.glob("*.py") if p.stem.startswith("build") or p.stem in {"host_pch", "ninja_file", "nvcc_pipeline", "compile_stage"}]
    assert (TOOLS / "compile" / "ninja_build.py").is_file() and (TOOLS / "stages" / "compile.py").is_file()


def test_every_package_under_tools_is_installed():
    """A package missing from pyproject.toml works in an editable install and is absent from a wheel."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {_name(p) for p in TOOLS.rglob("__init__.py")}
    assert packages <= listed, sorted(packages - listed)
