"""[judge] Parsing Python source into an ``ast`` tree, safely from any thread.

CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state, so
two threads in ``ast.parse`` at once can fail with ``SystemError: AST constructor
recursion depth mismatch`` (python/cpython#106905). The judge parses candidates and
tasks from several threads (evaluations side by side, a search's slots, batch
sessions): every parse in kernelfix goes through here, under one lock. A parse takes
milliseconds.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse`` under the process-wide lock; raises SyntaxError as it does."""
    with _LOCK:
        return ast.parse(source, filename=filename)
