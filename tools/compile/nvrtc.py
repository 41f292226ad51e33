"""[judge, candidate worker, one-shot child] Kernels a candidate compiles at run time with NVRTC (``torch.cuda._compile_kernel``).

The judge accepts them: how a kernel was compiled changes nothing the judge checks.
The same static checks run on the candidate, the same aten-op record covers its
forward, and the launch runs on the current stream unless the candidate passes
another one (``torch.cuda.Stream`` and friends are rejected statically as for any
candidate). What kernelfix adds while the candidate is imported:

- the compile is timed and recorded as an extension build (``kind="nvrtc"``), so the
  turn's feedback states it like any other build;
- a compile error reads like a failed extension build: the ``Error building
  extension`` form the judge's classifier knows, nvrtc's log, and the source written
  to the build directory as ``<kernel>.cu``, the name nvrtc's messages use, so the
  feedback shows the offending lines;
- on a machine without a CUDA GPU there is nothing to compile against (torch's
  NVRTC path needs the device's compute capability and a CUDA build of torch): the
  stage ends as "needs a GPU", as a load_inline build that cannot load does.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelfix.tools.verdict import ExtensionBuild


def install(
    build_root: Path, cpu_only: bool, record: Callable[[ExtensionBuild], None], gpu_required: type[Exception]
) -> None:
    """Wrap ``torch.cuda._compile_kernel`` where this torch has it."""
    import torch.cuda

    original = getattr(torch.cuda, "_compile_kernel", None)
    if original is None or getattr(original, "_kernelfix", False):
        return

    def compile_kernel(kernel_source: str, kernel_name: str, *args: Any, **kwargs: Any):
        if cpu_only:
            raise gpu_required(
                f"NVRTC kernel {kernel_name!r} (torch.cuda._compile_kernel) compiles and runs only on a CUDA GPU"
            )
        t0 = time.monotonic()
        try:
            return original(kernel_source, kernel_name, *args, **kwargs)
        except RuntimeError as e:
            if "compilation failed" not in str(e):
                raise
            raise RuntimeError(_as_build_error(build_root, kernel_source, kernel_name, str(e))) from None
        except OSError as e:  # torch loads libnvrtc by an unversioned name some installs lack
            raise RuntimeError(
                f"NVRTC is not available on this machine ({e}); build the kernel with load_inline instead"
            ) from None
        finally:
            record(ExtensionBuild(name=kernel_name, kind="nvrtc", seconds=round(time.monotonic() - t0, 3)))

    compile_kernel._kernelfix = True  # type: ignore[attr-defined]
    torch.cuda._compile_kernel = compile_kernel


def _as_build_error(build_root: Path, source: str, kernel_name: str, message: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", kernel_name) or "kernel"
    d = build_root / f"nvrtc_{name}"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{kernel_name}.cu").write_text(source)  # torch names the NVRTC program <kernel_name>.cu
    log = message.split("\n", 1)[-1].strip()
    return f"Error building extension 'nvrtc_{name}' (NVRTC):\nFAILED: {kernel_name}.cu\n{log}\n"


def available(device: str) -> bool:
    """Whether a candidate's NVRTC kernel can compile here: a CUDA device, a torch that has
    ``_compile_kernel``, and the NVRTC library torch loads for it."""
    if device != "cuda":
        return False  # before importing torch: a CPU session's process needs none
    import torch.cuda

    if not torch.cuda.is_available() or not hasattr(torch.cuda, "_compile_kernel"):
        return False
    try:
        from torch.cuda import _utils

        _utils._get_gpu_rtc_library()  # ctypes.CDLL of libnvrtc: pip CUDA wheels may lack the unversioned name
    except (ImportError, AttributeError, OSError):
        return False
    return True
