"""What a candidate or a task given to kernelfix is: a path to read, or the source text itself.

The rule for a candidate, the same in ``kernelfix.Judge``, ``JudgeClient`` and ``kernelfix eval``
(docs/service.md, "A path or text"): a ``pathlib.Path`` is read, and so is a ``str`` of one line that
names an existing file, whatever ``kind`` says (``kind`` then says what the file holds). A one-line
``str`` ending in .py/.md/.txt that names no file is an error. Any other ``str`` is the text itself.
A server never reads a path: its requests' text goes to ``Judge.evaluate_text``, and a verdict on text
that looks like a path says so (``path_hint``). A task is a path, or source text (a ``str`` with a
line break) that takes the name it is given (a client sends the file's stem) or ``task_<sha1 prefix>``.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Literal

from kernelfix.tools import candidate as candidate_mod
from kernelfix.tools.task import Task, TaskError
from kernelfix.tools.verdict import Verdict

CandidateKind = Literal["auto", "code", "reply"]
# What a file's or a text's name tells the extractor: a .py is code, anything else a model's reply.
FILENAME = {"code": "candidate.py", "reply": "reply.md"}
_PATH_SUFFIXES = (".py", ".md", ".txt")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def candidate_source(candidate: str | os.PathLike[str], kind: CandidateKind = "auto") -> tuple[str, str]:
    """(text, filename) of a candidate given as a path or as text; the filename tells the extractor
    whether it is code (``.py``) or a model's reply (``.md``: its last complete ```python block).

    The rule (docs/service.md, "A path or text"): a ``Path`` is read, and so is a ``str`` of one line
    that names an existing file, whatever ``kind``; ``kind`` then says what the file holds ("auto": by
    its suffix). A one-line ``str`` ending in .py/.md/.txt that names no file is an error
    (FileNotFoundError), not a candidate. Any other ``str`` is the text itself: with ``kind="auto"`` a
    reply when it holds a complete fenced block, else code. Text that must never be taken for a path
    (a request's body, a model's output) goes to ``Judge.evaluate_text``. Raises OSError /
    UnicodeDecodeError for an unreadable file."""
    if isinstance(candidate, os.PathLike) or _names_file(candidate):
        path = Path(candidate)
        return path.read_text(encoding="utf-8"), FILENAME.get(kind, path.name)
    if not isinstance(candidate, str):
        raise TypeError(f"a candidate is source text or a path, not {type(candidate).__name__}")
    if "\n" not in candidate and candidate.strip().endswith(_PATH_SUFFIXES):
        raise FileNotFoundError(
            f"candidate file not found: {candidate} (pass an existing path, or the source text itself)"
        )
    return candidate, FILENAME[text_kind(candidate) if kind == "auto" else kind]


def looks_like_path(text: str) -> bool:
    """One line, no spaces, with a directory separator or a source file's suffix: what a path passed where text
    was meant looks like (``examples/candidates/relu.py``); no kernel is one such line."""
    line = text.strip()
    return (
        0 < len(line) < 4096
        and "\n" not in line
        and " " not in line
        and ("/" in line or "\\" in line or line.endswith((*_PATH_SUFFIXES, ".cu", ".cpp")))
    )


def path_hint(v: Verdict, text: str) -> Verdict:
    """A failed verdict on text that looks like a path says so in its message: the judge saw the path's
    characters, not the file."""
    if v.ok or not looks_like_path(text):
        return v
    hint = (
        f"the candidate is the single line {text.strip()!r}, which looks like a file path, and was judged as text: "
        "send the file's contents (kernelfix.Judge and JudgeClient read a path that names an existing file; the server never does)"
    )
    return v.model_copy(update={"message": f"{v.message}; {hint}" if v.message else hint})


def text_kind(text: str) -> Literal["code", "reply"]:
    """What candidate text is: a model's reply when it holds a complete fenced block, else code."""
    return "reply" if candidate_mod.code_blocks(text) else "code"


def _names_file(text: object) -> bool:
    return isinstance(text, str) and "\n" not in text and len(text) < 4096 and os.path.isfile(text)


def task_source(task: str | os.PathLike[str]) -> str:
    """A task's source text: a path is read, text (a ``str`` with a line break) is itself."""
    if isinstance(task, str) and "\n" in task:
        return task
    return Task.load(task).source  # TaskError when missing, unreadable or not a task


def task_name(text: str, name: str | None = None) -> str:
    """The name a task given as text goes by: ``name``, checked, or ``task_<sha1 prefix>``."""
    name = name or f"task_{hashlib.sha1(text.encode()).hexdigest()[:10]}"
    if not _NAME.fullmatch(name):
        raise ValueError(f"task name {name!r}: letters, digits, _ . - only, at most 64, not starting with . or -")
    return name


def task_from_text(text: str, name: str | None, directory: Path) -> Task:
    """A Task from source text, always text (a server never reads a path a client sent): written to
    ``directory/<name>.py``, then checked as a task file is (TaskError)."""
    path = directory / f"{task_name(text, name)}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    try:
        return Task.load(path)
    except TaskError as e:
        raise TaskError(text_task_words(str(e), path, name)) from None


def text_task_words(message: str, path: Path, name: str | None) -> str:
    """A task error about a task given as text, said of that text (by the name it was given, if any), never
    of the file kernelfix wrote it to, which the user never had."""
    return message.replace(str(path), repr(name) if name else "(sent as text)")


def file_task_name(task: str | os.PathLike[str]) -> str | None:
    """The name a task file goes by, its stem, made a valid task name (what a client sends with the file's
    text, so the verdict and [judge.tasks.NAME] name it as ``kernelfix eval`` would); None for text."""
    if isinstance(task, str) and "\n" in task:
        return None
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", Path(task).stem).lstrip(".-")[:64]
    return stem if _NAME.fullmatch(stem) else None
