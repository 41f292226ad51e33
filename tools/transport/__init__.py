"""[any] Tensors between the judge's processes, through shared memory: never through disk.

The reference server (trusted) allocates one arena per trial for the inputs and
one for the expected outputs; their file descriptors travel over the request
sockets to the candidate's worker, which maps them. On a GPU an arena is device
memory shared through the CUDA driver's virtual memory API (a POSIX file
descriptor per allocation, so it crosses the sandbox's namespaces), and the
candidate's forward reads its inputs straight from it; on a CPU, or where the
driver refuses, it is a memfd in host memory. Only arenas cross: the reference
server's own memory (its inputs, reference outputs, caches) is never exported.
"""

from kernelfix.tools.transport.arena import Arena, ArenaKind, ArenaSpec
from kernelfix.tools.transport.tree import Skeleton, TensorSpec, UnsupportedValue, flatten, layout, unflatten

__all__ = [
    "Arena",
    "ArenaKind",
    "ArenaSpec",
    "Skeleton",
    "TensorSpec",
    "UnsupportedValue",
    "flatten",
    "layout",
    "unflatten",
]
