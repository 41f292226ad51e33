"""The environment a child sees: an allowlist, minus anything that looks secret."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

# Variables a candidate legitimately needs: toolchains, GPU selection, caches.
_KEEP_EXACT = {
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "LD_LIBRARY_PATH",
    "LIBRARY_PATH",
    "CPATH",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CC",
    "CXX",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "MAX_JOBS",
    "TORCH_CUDA_ARCH_LIST",
    "OMP_NUM_THREADS",
}
_KEEP_PREFIXES = ("NVIDIA_", "TRITON_", "TORCHINDUCTOR_", "KERNELFIX_", "NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_")
# Never passed, whatever the prefix: API keys, tokens, passwords.
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)


def scrubbed_env(extra: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: kept variables from ``base`` (default os.environ) plus ``extra``.

    ``extra`` is trusted (set by kernelfix) and may override; secrets in ``base``
    never pass, even under a kept name.
    """
    base = os.environ if base is None else base
    env = {
        k: v for k, v in base.items() if (k in _KEEP_EXACT or k.startswith(_KEEP_PREFIXES)) and not _SECRET.search(k)
    }
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if extra:
        env.update(extra)
    return env
