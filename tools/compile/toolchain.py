"""[judge, candidate worker, one-shot child] What the compilers and torch are, for cache keys, and where CUDA lives."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path


def find_cuda_home() -> str | None:
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            return os.environ[env]
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return "/usr/local/cuda"
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = Path(os.path.realpath(nvcc)).parent.parent
        if (home / "include" / "cuda_runtime.h").exists():
            return str(home)
    return None


@functools.lru_cache(maxsize=32)
def tool_identity(executable: str) -> str:
    """``executable --version`` plus where it really lives: a different compiler is a different key."""
    path = shutil.which(executable) or executable
    try:
        r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        version = (r.stdout or r.stderr).strip()
    except (OSError, subprocess.SubprocessError) as e:
        version = f"unavailable: {e}"
    try:
        st = os.stat(os.path.realpath(path))
        stamp = f"{os.path.realpath(path)} {st.st_size} {int(st.st_mtime)}"
    except OSError:
        stamp = path
    return f"{stamp}\n{version}"


@functools.lru_cache(maxsize=8)
def is_gcc(executable: str) -> bool:
    """True for GNU g++ (PCH here uses gcc's .gch files); clang and others are left alone."""
    try:
        r = subprocess.run([shutil.which(executable) or executable, "-v"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    text = r.stdout + r.stderr
    return "COLLECT_GCC=" in text and "gcc version" in text


@functools.lru_cache(maxsize=1)
def torch_identity() -> str:
    """Which torch this is, for cache keys: its version file (version, git commit, CUDA) and its C
    extension's size and time, where it lives. Read from disk, not imported: the judge's and the
    agent's processes need no torch of their own (a second or more of their start)."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return "no torch"
    root = Path(spec.origin).parent
    try:
        version = (root / "version.py").read_text()
    except OSError:
        version = "no version.py"
    stamps = []
    for lib in sorted(root.glob("_C*.so")) + sorted((root / "lib").glob("libtorch_cpu*.so*")):
        try:
            st = lib.stat()
            stamps.append(f"{lib.name} {st.st_size} {st.st_mtime_ns}")
        except OSError:
            continue
    return " | ".join([" ".join(version.split()), *stamps, str(root)])


def python_abi() -> str:
    return f"{sys.implementation.cache_tag} {sysconfig.get_config_var('SOABI')}"
