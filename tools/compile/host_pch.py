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
extension name. Include directories are left out of its key too, for what the
header preprocesses to under them: a CUDA extension's binding TU adds the CUDA
toolkit's directory (and on a CPU-only machine kernelfix's stub headers), which
torch/extension.h reads nothing from, so it takes the PCH a C++ extension built
instead of spending a second build on the same parse. A directory that does
change what the header reads (a shadowing header) changes the text and gets a
PCH of its own. gcc does not check include paths when it loads a PCH; identical
preprocessed text is what makes the parse it holds the TU's own.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

from kernelfix.tools.compile.store import Store, digest
from kernelfix.tools.compile.toolchain import is_gcc, tool_identity, torch_identity

PCH_SCHEME = 2
HEADER = "kf_torch_extension.h"
FAILED = "failed.txt"  # an entry that records a failed PCH build
SAME_AS = "pch_key.txt"  # a flag set's entry: the key of the PCH it uses
_INCLUDE_DIRS = ("-I", "-isystem", "-iquote", "-idirafter")
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
    key = pch_key(flags, store)
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


def pch_key(flags: list[str], store: Store) -> str:
    """The key of the PCH that serves ``flags`` (a PCH build's command): the flags without their include
    directories, and the digest of what the header preprocesses to under them. Kept per flag set in
    ``store``, so the preprocessing (about a second) runs once per machine and flags."""
    tool, torch = tool_identity(flags[0]), torch_identity()
    alias = digest("host-pch-flags", PCH_SCHEME, flags, tool, torch, _FIRST_LINE)
    entry = store.get(alias)
    if entry is not None:
        try:
            return (entry / SAME_AS).read_text().strip()
        except OSError:
            pass
    key = digest("host-pch", PCH_SCHEME, _without_include_dirs(flags), tool, torch, _FIRST_LINE, _preprocessed(flags))

    def fill(d: Path) -> None:
        (d / SAME_AS).write_text(key)

    try:
        store.publish(alias, fill)
    except OSError:
        pass  # only the next TU's preprocessing is lost
    return key


def _without_include_dirs(flags: list[str]) -> list[str]:
    out: list[str] = []
    skip_next = False
    for a in flags:
        if skip_next:
            skip_next = False
        elif a in _INCLUDE_DIRS:
            skip_next = True
        elif not a.startswith(_INCLUDE_DIRS):
            out.append(a)
    return out


def _preprocessed(flags: list[str]) -> str:
    """The digest of the header's preprocessed text (line markers and their system-header marks included);
    where it does not preprocess, one of its flags: the build then fails and records why, as it would have."""
    r = subprocess.run(
        [*flags, "-E", "-x", "c++", "-", "-o", "-"], input=(_FIRST_LINE + "\n").encode(), capture_output=True
    )
    if r.returncode != 0:
        return digest("unpreprocessed", flags)
    return hashlib.sha256(r.stdout).hexdigest()


def _build(flags: list[str], d: Path) -> None:
    header = d / HEADER
    header.write_text(_FIRST_LINE + "\n")
    cmd = [*flags, "-x", "c++-header", str(header), "-o", str(header) + ".gch"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        (d / FAILED).write_text(f"building the torch/extension.h PCH failed: {(r.stdout + r.stderr).strip()[-2000:]}")
        Path(str(header) + ".gch").unlink(missing_ok=True)
