"""Which sandbox layers let CUDA work on this machine: each configuration, one CUDA init.

python3 bench/sandbox_gpu_probe.py
"""

import sys

from kernelfix.sandbox.isolation import LAYERS, Isolation
from kernelfix.sandbox.probes import _cuda_runs, for_gpu

base = Isolation()
print(f"full sandbox: {_cuda_runs(base, sys.executable)}", flush=True)
for layer in LAYERS:
    only = Isolation.off().model_copy(update={layer: True})
    print(f"only {layer}: {_cuda_runs(only, sys.executable)}", flush=True)
chosen, note = for_gpu(base)
print("chosen:", chosen.model_dump(exclude={"writable", "hidden"}), "|", note)
