"""[judge, candidate worker, one-shot child] A precompiled ``torch/extension.h`` for the host translation unit of a load_inline build.

load_inline's ``main.cpp`` begins with ``#include <torch/extension.h>`` (torch
puts it there, or the candidate does under ``no_implicit_headers``), which gcc
spends most of the TU's time parsing. gcc can load that parse from a ``.gch``
file instead: this module builds one per (compiler, flags, torch) in kernelfix's
cache and compiles the TU with ``-include <that header>``. It applies when the
include is the TU's first token: only blank lines and comments may come before
it (a model opens its raw string and starts a new line). The header holds the same include,
so the TU sees exactly the same token sequence (its own include is then a no-op
under torch's ``#pragma once``, and its line numbers are unchanged), and the
object file is byte-identical (tests check it). If gcc finds the PCH unusable
it quietly reads the header text instead: slower, same result.

The one flag left out of the PCH is ``-DTORCH_EXTENSION_NAME=...``, which the
torch headers never mention (gcc checks that), so one PCH serves every
extension name.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

from kernelfix.tools.compile.store import Store, digest
from kernelfix.tools.compile.toolchain import is_gcc, tool_identity, torch_identity

PCH_SCHEME = 1
HEADER = "kf_torch_extension.h"
FAILED = "failed.txt"  # an entry that records a failed PCH build
_FIRST_LINE = "#include <torch/extension.h>"
_ORDER_SENSITIVE = ("-include", "-imacros", "-x", "-E", "-S", "-M", "-MM")
NOT_FIRST = "#include <torch/extension.h> does not come first"  # why a binding TU went without the PCH
# What may precede the include: whitespace, // and /* */ comments. No backslash anywhere
# in it: a line-continued // comment would swallow the next line, include and all.
_PREFIX = re.compile(r"(?:[ \t\r\n\f\v]+|//[^\n\\]*(?=\n)|/\*(?:[^*\\]|\*(?!/))*\*/)*")
_INCLUDE = re.compile(r"#[ \t]*include[ \t]*<torch/extension\.h>[ \t]*(?://[^\n\\]*)?(?:\n|\Z)")


class PchUse(NamedTuple):
    args: list[str]  # what to add to the compile command
    made_seconds: float | None  # this call built the PCH first, taking this long (once per machine and flags)


class PchError(Exception):
    """The PCH could not be built; the TU is compiled without it."""


def _creation_argv(argv: list[str]) -> list[str] | None:
    """The compile command turned into a PCH build for the header: the same compiler and flags,
    minus the source, the object, dependency files and the extension name."""
    out: list[str] = []
    skip_next = False
    saw_c = False
    for i, a in enumerate(argv):
        if skip_next:
            skip_next = False
            continue
        if a in ("-MF", "-MT", "-MQ", "-o"):
            skip_next = True
            continue
        if a in ("-MMD", "-MD"):
            continue
        if a == "-c":
            saw_c = True
            skip_next = True  # torch writes "-c $in"
            continue
        if a.startswith("-DTORCH_EXTENSION_NAME="):
            continue
        if a == "-D" and i + 1 < len(argv) and argv[i + 1].startswith("TORCH_EXTENSION_NAME="):
            skip_next = True
            continue
        if a.startswith(_ORDER_SENSITIVE):
            return None
        out.append(a)
    return out if saw_c else None


def begins_with_torch_extension(text: str) -> bool:
    """True when ``#include <torch/extension.h>`` is the first thing the preprocessor sees in ``text``."""
    prefix = _PREFIX.match(text)
    return _INCLUDE.match(text, prefix.end() if prefix else 0) is not None


def include_args(command: str, source: Path, store: Store) -> PchUse | None:
    """Extra arguments that make ``command`` (a torch ``compile`` rule command) use the PCH,
    building it first if needed; None when the TU is not one this applies to."""
    try:
        text = source.read_text(errors="replace")
    except OSError:
        return None
    if not begins_with_torch_extension(text):
        return None  # something else comes first: the PCH would change what the TU means
    argv = shlex.split(command)
    if not argv or not is_gcc(argv[0]):
        return None
    flags = _creation_argv(argv)
    if flags is None:
        return None
    key = digest("host-pch", PCH_SCHEME, flags, tool_identity(argv[0]), torch_identity(), _FIRST_LINE)
    entry = store.get(key)
    made = None
    if entry is None:
        with store.lock(key):
            entry = store.get(key)
            if entry is None:
                t0 = time.monotonic()
                entry = store.publish(key, lambda d: _build(flags, d))
                made = round(time.monotonic() - t0, 3)
    failed = entry / FAILED
    if failed.exists():  # built once and failed: not retried for every TU with these flags
        raise PchError(failed.read_text()[:2000])
    return PchUse(["-include", str(entry / HEADER)], made)


def _build(flags: list[str], d: Path) -> None:
    header = d / HEADER
    header.write_text(_FIRST_LINE + "\n")
    cmd = [*flags, "-x", "c++-header", str(header), "-o", str(header) + ".gch"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        (d / FAILED).write_text(f"building the torch/extension.h PCH failed: {(r.stdout + r.stderr).strip()[-2000:]}")
        Path(str(header) + ".gch").unlink(missing_ok=True)
