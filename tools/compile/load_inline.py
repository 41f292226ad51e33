"""[candidate worker, one-shot child] How a candidate's ``load_inline`` builds, inside the judge's child process.

``install`` replaces ``torch.utils.cpp_extension.load_inline`` before the
candidate is imported, so the candidate's code means what it means under stock
torch, but:

- every build lands in the evaluation's own build directory (two sessions never
  share one by accident, and the candidate cannot write its build elsewhere);
- torch's ninja step is replaced by :mod:`kernelfix.tools.compile.ninja_build`: the
  same build.ninja and commands, with a content-addressed cache of finished
  extensions and compiled TUs shared across sessions and processes, a
  precompiled torch header for the binding TU and nvcc's front ends in
  parallel (each lever in :class:`~kernelfix.tools.config.BuildOptions`);
  a cached ``.so`` is loaded by torch itself, under the module name the
  candidate asked for;
- on a CUDA machine, CUDA sources are built for this GPU's arch only (stock
  adds PTX for GPUs newer than any here);
- on a machine without a CUDA GPU (CPU torch, CI), CUDA sources still go
  through the real host compiler, nvcc and linker, so compile errors are
  caught; the extension cannot be loaded there, which ends the stage with
  :class:`GpuRequired` instead of a misleading error;
- kernels compiled with NVRTC (``torch.cuda._compile_kernel``) are timed and
  recorded too (:mod:`~kernelfix.tools.compile.nvrtc`).

What each extension build did is kept for the judge's compile report (:func:`records`).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from kernelfix.base.cache_dir import BUILD_CACHE, cache_root
from kernelfix.tools.compile import GpuRequired
from kernelfix.tools.compile import ninja_build as build_runner
from kernelfix.tools.compile import nvrtc as build_nvrtc
from kernelfix.tools.compile.store import Store, digest
from kernelfix.tools.compile.toolchain import find_cuda_home, tool_identity
from kernelfix.tools.config import BuildOptions
from kernelfix.tools.verdict import ExtensionBuild

_STUB_LIBS = ("c10_cuda", "torch_cuda")

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

_records: list[ExtensionBuild] = []


def records() -> list[ExtensionBuild]:
    """Every extension build (or cache hit) in this process so far."""
    return list(_records)


def _stub_store() -> Store:
    # In the shared cache, named by content: every evaluation's build flags point at the
    # same directories, so the object and extension caches can match across evaluations.
    return Store(cache_root() / BUILD_CACHE / "cpu-stubs")


def _stub_lib_dir() -> Path:
    """Empty libc10_cuda.so/libtorch_cuda.so so a CPU-only torch can link a CUDA extension."""
    source = "/* stub: kernelfix links CUDA extensions on CPU-only torch to check them */\n"
    store = _stub_store()
    key = digest("stub-libs", _STUB_LIBS, source, tool_identity("cc"))

    def fill(d: Path) -> None:
        (d / "empty.c").write_text(source)
        for lib in _STUB_LIBS:
            subprocess.run(
                ["cc", "-shared", "-fPIC", "-o", str(d / f"lib{lib}.so"), str(d / "empty.c")],
                check=True,
                capture_output=True,
            )

    return store.get(key) or store.publish(key, fill)


def _stub_include_dir(cuda_home: str) -> Path | None:
    """Stub headers for those missing from this CUDA toolkit and torch build; None if none are."""
    import torch.utils.cpp_extension as ce

    search = [Path(cuda_home) / "include", *map(Path, ce.include_paths())]
    missing = sorted(h for h in _STUB_HEADERS if not any((d / h).exists() for d in search))
    if not missing:
        return None
    store = _stub_store()
    key = digest("stub-headers", {h: _STUB_HEADERS[h] for h in missing})

    def fill(d: Path) -> None:
        for h in missing:
            f = d / h
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text("#pragma once\n/* kernelfix: stub for a CPU-only compile check */\n" + _STUB_HEADERS[h])

    return store.get(key) or store.publish(key, fill)


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "ext"


def _local_arch_list() -> str | None:
    """This machine's GPU archs as TORCH_CUDA_ARCH_LIST, clamped like torch clamps them, without +PTX."""
    import torch

    if not torch.cuda.is_available():
        return None
    supported = [
        int("".join(re.findall(r"\d+", a.split("_")[1]))) for a in torch.cuda.get_arch_list() if a.startswith("sm_")
    ]
    if not supported:
        return None
    top = max((sm // 10, sm % 10) for sm in supported)
    archs = sorted({min(top, torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count())})
    return ";".join(f"{a}.{b}" for a, b in archs) or None


def _names_an_arch(flags: Any) -> bool:
    return any("-arch" in f or "gencode" in f for f in flags or [])


def install(build_root: Path, device: str, options: BuildOptions | None = None) -> None:
    """Wrap torch's extension builds (``load_inline`` and its ninja step) when
    ``torch.utils.cpp_extension`` is imported (now, if it is: a Triton candidate's worker never
    imports it), and NVRTC's ``torch.cuda._compile_kernel`` now."""
    import torch

    from kernelfix.tools.import_hooks import after_import

    options = options or BuildOptions()
    build_root.mkdir(parents=True, exist_ok=True)
    cpu_only = device == "cpu" or not torch.cuda.is_available()
    build_nvrtc.install(build_root, cpu_only, _records.append, GpuRequired)
    after_import("torch.utils.cpp_extension", lambda ce: _wrap_cpp_extension(ce, build_root, cpu_only, options))


def _wrap_cpp_extension(ce: Any, build_root: Path, cpu_only: bool, options: BuildOptions) -> None:
    import torch

    original = ce.load_inline
    if options.replaces_ninja:
        ce._run_ninja_build = functools.partial(
            build_runner.run, options=options, record=_records.append, fallback=ce._run_ninja_build
        )

    def load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any):
        kwargs["build_directory"] = str(build_root / _sanitize(name))
        Path(kwargs["build_directory"]).mkdir(parents=True, exist_ok=True)
        has_cuda = bool(cuda_sources) or bool(kwargs.get("with_cuda"))
        if has_cuda:
            # Line tables (no effect on the code): Nsight Compute's source counters then name the
            # candidate's own line in a finding (tools/profile/findings.py).
            flags = list(kwargs.get("extra_cuda_cflags") or [])
            if "-lineinfo" not in flags and "-G" not in flags:
                kwargs["extra_cuda_cflags"] = [*flags, "-lineinfo"]
        if has_cuda and not cpu_only and options.local_arch and "TORCH_CUDA_ARCH_LIST" not in os.environ:
            if not _names_an_arch(kwargs.get("extra_cuda_cflags")):
                arch = _local_arch_list()
                if arch:
                    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
        if not (has_cuda and cpu_only):
            return original(name, cpp_sources, cuda_sources, *args, **kwargs)
        if not torch.version.cuda and ce.CUDA_HOME is None:
            ce.CUDA_HOME = find_cuda_home()
            if ce.CUDA_HOME is None:
                raise GpuRequired("CUDA sources need nvcc and a CUDA GPU; neither is on this machine")
        kwargs["extra_ldflags"] = [*(kwargs.get("extra_ldflags") or []), f"-L{_stub_lib_dir()}"]
        stub_inc = _stub_include_dir(ce.CUDA_HOME)
        if stub_inc is not None:
            kwargs["extra_include_paths"] = [*(kwargs.get("extra_include_paths") or []), str(stub_inc)]
        if not _names_an_arch(kwargs.get("extra_cuda_cflags")):
            # CPU torch knows no GPU arch to target; build for Hopper like the device.
            os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
        try:
            original(name, cpp_sources, cuda_sources, *args, **kwargs)
        except (ImportError, OSError) as e:
            built = list(Path(kwargs["build_directory"]).glob("*.so"))
            if built:
                raise GpuRequired(
                    f"compiled and linked {built[0].name}; loading it needs CUDA torch and a GPU ({e})"
                ) from None
            raise
        # Some CUDA extensions even load here (no torch CUDA symbols); their kernels still cannot run.
        raise GpuRequired(f"compiled and linked {_sanitize(name)}; running its CUDA kernels needs a GPU")

    ce.load_inline = load_inline
