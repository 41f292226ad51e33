"""[judge] Turn what the user or the model gave into candidate source, or say why not.

A candidate is Python source defining ``class ModelNew``. It arrives either as
a ``.py`` file or inside a model reply, where it is the last complete fenced
Python block.
"""

from __future__ import annotations

import ast
import hashlib
import re

from pydantic import BaseModel, ConfigDict

from kernelfix.tools import pysource
from kernelfix.tools.verdict import Backend, Category

_FENCE = re.compile(
    r"^(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+.-]*)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S
)
_PY_LANGS = {"python", "py", "python3", "py3"}


class Extraction(BaseModel):
    """Candidate code, or the format/syntax failure that stops it before compile."""

    model_config = ConfigDict(extra="forbid")

    code: str | None
    failure: Category | None = None
    message: str | None = None
    line: int | None = None
    backend: Backend = "unknown"
    sha1: str | None = None


def code_blocks(reply: str) -> list[tuple[str, str]]:
    """All complete fenced blocks of a reply, as (language, body), in order."""
    return [(m["lang"].lower(), m["body"]) for m in _FENCE.finditer(reply)]


def last_python_block(reply: str) -> str | None:
    blocks = code_blocks(reply)
    python = [b for lang, b in blocks if lang in _PY_LANGS]
    if python:
        return python[-1]
    # Unlabelled blocks count when they parse as Python (models often omit the tag).
    for lang, body in reversed(blocks):
        if lang == "" and _parses(body):
            return body
    return None


def _parses(code: str) -> bool:
    try:
        pysource.parse(code)
    except SyntaxError:
        return False
    return True


def detect_backend(code: str) -> Backend:
    if re.search(r"\bload_inline\b|\bcpp_extension\b|__global__", code):
        return "cuda"
    if re.search(r"\btriton\b", code):
        return "triton"
    if re.search(r"\btorch\b", code):
        return "torch"
    return "unknown"


def defines_model_new(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets):
            return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == "ModelNew" for a in node.names):
            return True
    return False


def check_code(code: str) -> Extraction:
    """Syntax and ModelNew checks of candidate source."""
    sha1 = hashlib.sha1(code.encode()).hexdigest()
    backend = detect_backend(code)
    try:
        tree = pysource.parse(code, filename="candidate.py")
    except SyntaxError as e:
        text = (e.text or "").rstrip()
        return Extraction(
            code=code,
            failure=Category.SYNTAX,
            message=f"line {e.lineno}: {e.msg}" + (f": {text.strip()}" if text else ""),
            line=e.lineno,
            backend=backend,
            sha1=sha1,
        )
    if not defines_model_new(tree):
        return Extraction(
            code=code,
            failure=Category.NO_MODEL_NEW,
            message="the code defines no class ModelNew",
            backend=backend,
            sha1=sha1,
        )
    return Extraction(code=code, backend=backend, sha1=sha1)


def from_reply(reply: str) -> Extraction:
    """Candidate from a model reply: the last complete Python block."""
    code = last_python_block(reply)
    if code is None:
        return Extraction(
            code=None,
            failure=Category.NO_CODE,
            message="the reply has no complete ```python code block",
        )
    return check_code(code)


def from_file_text(text: str, filename: str) -> Extraction:
    """A ``.py`` file is code; anything else (.md, .txt, a saved reply) is a reply."""
    if filename.endswith(".py"):
        return check_code(text)
    return from_reply(text)
