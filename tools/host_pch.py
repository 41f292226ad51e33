"""A precompiled ``torch/extension.h`` for the host translation unit of a load_inline build.

load_inline's ``main.cpp`` begins with ``#include <torch/extension.h>``, which
gcc spends most of the TU's time parsing. gcc can load that parse from a
``.gch`` file instead: this module builds one per (compiler, flags, torch) in
kernelfix's cache and compiles the TU with ``-include <that header>``. The
header's first line is the same include, so the TU sees exactly the same token
sequence, and the object file is byte-identical (tests check it). If gcc finds
the PCH unusable it quietly reads the header text instead: slower, same result.

The one flag left out of the PCH is ``-DTORCH_EXTENSION_NAME=...``, which the
torch headers never mention (gcc checks that), so one PCH serves every
extension name.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from kernelfix.tools.store import Store, digest
from kernelfix.tools.toolchain import is_gcc, tool_identity, torch_identity

PCH_SCHEME = 1
HEADER = "kf_torch_extension.h"
FAILED = "failed.txt"  # an entry that records a failed PCH build
_FIRST_LINE = "#include <torch/extension.h>"
_ORDER_SENSITIVE = ("-include", "-imacros", "-x", "-E", "-S", "-M", "-MM")


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


def include_args(command: str, source: Path, store: Store) -> list[str] | None:
    """Extra arguments that make ``command`` (a torch ``compile`` rule command) use the PCH,
    building it first if needed; None when the TU is not one this applies to."""
    try:
        first = source.read_text(errors="replace").split("\n", 1)[0].strip()
    except OSError:
        return None
    if first != _FIRST_LINE:
        return None  # no_implicit_headers, or not a load_inline TU
    argv = shlex.split(command)
    if not argv or not is_gcc(argv[0]):
        return None
    flags = _creation_argv(argv)
    if flags is None:
        return None
    key = digest("host-pch", PCH_SCHEME, flags, tool_identity(argv[0]), torch_identity(), _FIRST_LINE)
    entry = store.get(key)
    if entry is None:
        with store.lock(key):
            entry = store.get(key) or store.publish(key, lambda d: _build(flags, d))
    failed = entry / FAILED
    if failed.exists():  # built once and failed: not retried for every TU with these flags
        raise PchError(failed.read_text()[:2000])
    return ["-include", str(entry / HEADER)]



def _build(flags: list[str], d: Path) -> None:
    header = d / HEADER
    header.write_text(_FIRST_LINE + "\n")
    cmd = [*flags, "-x", "c++-header", str(header), "-o", str(header) + ".gch"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        (d / FAILED).write_text(f"building the torch/extension.h PCH failed: {(r.stdout + r.stderr).strip()[-2000:]}")
        Path(str(header) + ".gch").unlink(missing_ok=True)
