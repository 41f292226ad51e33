"""Which sandbox layers let CUDA work on this machine: each configuration, one CUDA init.

    python3 bench/sandbox_gpu_probe.py
"""

import sys

from kernelfix.sandbox.isolation import _GPU_FALLBACKS, Isolation, _cuda_runs, for_gpu

base = Isolation()
print(f"full sandbox: {_cuda_runs(base, sys.executable)}")
for label, change in _GPU_FALLBACKS:
    print(f"{label}: {_cuda_runs(base.model_copy(update=change), sys.executable)}")
for layer in ("network", "pid", "filesystem", "capabilities"):
    only = Isolation.off().model_copy(update={layer: True})
    print(f"only {layer}: {_cuda_runs(only, sys.executable)}")
print(f"only filesystem, all of /dev: {_cuda_runs(Isolation.off().model_copy(update={'filesystem': True, 'devices': ['*']}), sys.executable)}")
chosen, note = for_gpu(base)
print("chosen:", chosen.model_dump(exclude={"writable", "hidden"}), "|", note)
