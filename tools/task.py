"""[judge] A KernelBench-format task: a Python file with Model, get_inputs, get_init_inputs."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from kernelfix.tools import pysource

REQUIRED = ("Model", "get_inputs", "get_init_inputs")


class TaskError(Exception):
    """The task itself is unusable (unreadable, not Python, missing names, fails to import).

    Never the candidate's fault; the CLI exits 2 on it.
    """


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path
    name: str
    source: str
    sha1: str

    @property
    def declares_backward(self) -> bool:
        """The task says ``BACKWARD = True`` at top level (``kernelfix capture`` of a training call writes it)."""
        for node in pysource.parse(self.source).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "BACKWARD" for t in node.targets
            ):
                return isinstance(node.value, ast.Constant) and node.value.value is True
        return False

    @classmethod
    def load(cls, path: str | Path) -> "Task":
        """Read and statically check a task file. Importing happens in a child process."""
        p = Path(path)
        try:
            source = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise TaskError(f"task file not found: {p}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise TaskError(f"cannot read task file {p}: {e}") from None
        try:
            tree = pysource.parse(source, filename=str(p))
        except SyntaxError as e:
            raise TaskError(f"task {p} is not valid Python: line {e.lineno}: {e.msg}") from None
        defined = _top_level_names(tree)
        missing = [n for n in REQUIRED if n not in defined]
        if missing:
            raise TaskError(
                f"task {p} lacks {', '.join(missing)}: a KernelBench task defines "
                "class Model(nn.Module), get_inputs() and get_init_inputs()"
            )
        return cls(path=p.resolve(), name=p.stem, source=source, sha1=hashlib.sha1(source.encode()).hexdigest())


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names.add(t.id)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add((a.asname or a.name).split(".")[0])
    return names
