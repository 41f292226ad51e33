"""[judge] compute-sanitizer: where it is, its version, and the command line that checks one forward.

The sanitizer runs in front of the sanitizer target (``kernelfix.tools.workers.sanitizer_target``), one
process per tool, and writes its report to a file (``--log-file``) so the candidate's own output
cannot mix into it. Its options are those of compute-sanitizer 2025.3 (CUDA 13), which the H100 device has; each is older than that.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

from kernelfix.tools.verdict import SanitizerTool

EXECUTABLE = "compute-sanitizer"
PADDING = 4096  # bytes of guard memcheck adds after each allocation (--padding)
PRINT_LIMIT = 64  # reports per tool: memcheck prints one per thread, and the first few places are what count
# Every tensor its own cudaMalloc, so memcheck sees a tensor's real end and initcheck a fresh allocation
# (torch's caching allocator hands out slices of larger blocks, written before).
ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
# The order tools run in when they cannot all run at once: the crash first, then the race.
ORDER: tuple[SanitizerTool, ...] = ("memcheck", "racecheck", "synccheck", "initcheck")


def _candidates() -> list[str]:
    homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    paths = [str(Path(h) / "bin" / EXECUTABLE) for h in homes if h]
    paths += sorted(glob.glob(f"/usr/local/cuda*/bin/{EXECUTABLE}"), reverse=True)
    paths += sorted(glob.glob(f"/usr/local/cuda*/compute-sanitizer/{EXECUTABLE}"), reverse=True)
    return paths


def find(override: str | None = None) -> tuple[str | None, str | None]:
    """(the executable, None) or (None, why there is none, in one line)."""
    if override:
        path = (
            shutil.which(override)
            if os.sep not in override
            else (override if os.access(override, os.X_OK) and Path(override).is_file() else None)
        )
        if path:
            return path, None
        return None, f"compute-sanitizer not found at {override} (judge setting sanitizer_path)"
    path = shutil.which(EXECUTABLE) or next(
        (p for p in _candidates() if os.access(p, os.X_OK) and Path(p).is_file()), None
    )
    if path:
        return path, None
    return (
        None,
        "compute-sanitizer is not installed or not on PATH (it ships with the CUDA toolkit); set sanitizer_path in the judge settings",
    )


def version(path: str) -> str | None:
    """Its version line ("Version 2025.3.0.0 ..."), or None."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in out.splitlines() if "version" in ln.lower()]
    return lines[-1][:120] if lines else None


def command(path: str, tool: SanitizerTool, log_file: Path) -> list[str]:
    """compute-sanitizer's argv, to go in front of the target's. Device backtraces only: the kernel's
    own frames name the caller of an inlined device function; host frames say nothing here."""
    argv = [
        path,
        "--tool",
        tool,
        "--log-file",
        str(log_file),
        "--print-limit",
        str(PRINT_LIMIT),
        "--show-backtrace",
        "device",
    ]
    if tool == "memcheck":
        # A guard after every allocation: measured on the H100, a read one float past a 1 MiB tensor landed in the
        # next allocation (the output) and memcheck said nothing; in padding it is out of bounds.
        argv += ["--padding", str(PADDING)]
    return argv
