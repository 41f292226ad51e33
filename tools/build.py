"""How a candidate's ``load_inline`` builds, inside the judge's child process.

``install`` replaces ``torch.utils.cpp_extension.load_inline`` before the
candidate is imported, so the candidate's code means what it means under stock
torch, but:

- every build lands in the evaluation's own build directory (two sessions never
  share one by accident, and the candidate cannot write its build elsewhere);
- on a machine without a CUDA GPU (CPU torch, CI), CUDA sources still go
  through the real host compiler, nvcc and linker, so compile errors are
  caught; the extension cannot be loaded there, which ends the stage with
  :class:`GpuRequired` instead of a misleading error.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any


class GpuRequired(Exception):
    """The candidate compiled, but running it needs a CUDA GPU this machine lacks."""


_STUB_LIBS = ("c10_cuda", "torch_cuda")


def _find_cuda_home() -> str | None:
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            return os.environ[env]
    nvcc = shutil.which("nvcc")
    if nvcc:
        return str(Path(os.path.realpath(nvcc)).parent.parent)
    for cand in ("/usr/local/cuda",):
        if Path(cand, "bin", "nvcc").exists():
            return cand
    return None


def _stub_lib_dir(root: Path) -> Path:
    """Empty libc10_cuda.so/libtorch_cuda.so so a CPU-only torch can link a CUDA extension."""
    d = root / "_cpu_link_stubs"
    d.mkdir(parents=True, exist_ok=True)
    for lib in _STUB_LIBS:
        so = d / f"lib{lib}.so"
        if not so.exists():
            src = d / "empty.c"
            src.write_text("/* stub: kernelfix links CUDA extensions on CPU-only torch to check them */\n")
            subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True, capture_output=True)
    return d


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "ext"


def install(build_root: Path, device: str) -> None:
    import torch
    import torch.utils.cpp_extension as ce

    build_root.mkdir(parents=True, exist_ok=True)
    original = ce.load_inline
    cpu_only = device == "cpu" or not torch.cuda.is_available()

    def load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any):
        kwargs["build_directory"] = str(build_root / _sanitize(name))
        Path(kwargs["build_directory"]).mkdir(parents=True, exist_ok=True)
        has_cuda = bool(cuda_sources) or bool(kwargs.get("with_cuda"))
        if not (has_cuda and cpu_only):
            return original(name, cpp_sources, cuda_sources, *args, **kwargs)
        if not torch.version.cuda and ce.CUDA_HOME is None:
            ce.CUDA_HOME = _find_cuda_home()
            if ce.CUDA_HOME is None:
                raise GpuRequired("CUDA sources need nvcc and a CUDA GPU; neither is on this machine")
        kwargs["extra_ldflags"] = [*(kwargs.get("extra_ldflags") or []), f"-L{_stub_lib_dir(build_root)}"]
        if not any("-arch" in f or "gencode" in f for f in kwargs.get("extra_cuda_cflags") or []):
            # CPU torch knows no GPU arch to target; build for Hopper like the device.
            os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
        try:
            return original(name, cpp_sources, cuda_sources, *args, **kwargs)
        except (ImportError, OSError) as e:
            built = list(Path(kwargs["build_directory"]).glob("*.so"))
            if built:
                raise GpuRequired(
                    f"compiled and linked {built[0].name}; loading it needs CUDA torch and a GPU ({e})"
                ) from None
            raise

    ce.load_inline = load_inline
