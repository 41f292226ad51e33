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
    if Path("/usr/local/cuda/bin/nvcc").exists():
        return "/usr/local/cuda"
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = Path(os.path.realpath(nvcc)).parent.parent
        if (home / "include" / "cuda_runtime.h").exists():
            return str(home)
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


# Minimal declarations for headers a CPU-only machine lacks (the CUDA math libraries'
# and the header a CUDA build of torch generates). ATen/cuda/CUDAContext.h, which
# most candidates include for getCurrentCUDAStream, includes them. Only the handle
# and status types are declared: code that really calls these libraries is rejected
# by the static checks anyway, and on a GPU machine the real headers are used.
_STUB_HEADERS = {
    "cusparse.h": "typedef struct cusparseContext* cusparseHandle_t;\ntypedef enum { CUSPARSE_STATUS_SUCCESS = 0 } cusparseStatus_t;\n",
    "cublas_v2.h": "typedef struct cublasContext* cublasHandle_t;\ntypedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;\n",
    "cublasLt.h": '#include "cublas_v2.h"\ntypedef struct cublasLtContext* cublasLtHandle_t;\n',
    "cusolverDn.h": "typedef struct cusolverDnContext* cusolverDnHandle_t;\ntypedef enum { CUSOLVER_STATUS_SUCCESS = 0 } cusolverStatus_t;\n",
    "cusolver_common.h": '#include "cusolverDn.h"\n',
    "c10/cuda/impl/cuda_cmake_macros.h": "#define C10_CUDA_BUILD_SHARED_LIBS\n",
}


def _stub_include_dir(root: Path, cuda_home: str) -> Path | None:
    """Stub headers for those missing from this CUDA toolkit and torch build; None if none are."""
    import torch.utils.cpp_extension as ce

    search = [Path(cuda_home) / "include", *map(Path, ce.include_paths())]
    missing = [h for h in _STUB_HEADERS if not any((d / h).exists() for d in search)]
    if not missing:
        return None
    d = root / "_cpu_stub_include"
    for h in missing:
        f = d / h
        f.parent.mkdir(parents=True, exist_ok=True)
        if not f.exists():
            f.write_text("#pragma once\n/* kernelfix: stub for a CPU-only compile check */\n" + _STUB_HEADERS[h])
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
        stub_inc = _stub_include_dir(build_root, ce.CUDA_HOME)
        if stub_inc is not None:
            kwargs["extra_include_paths"] = [*(kwargs.get("extra_include_paths") or []), str(stub_inc)]
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
