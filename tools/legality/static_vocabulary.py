"""[judge] What the static check looks for: the modules, calls and attributes that tamper with torch, the judge or the
interpreter; the torch calls that compute (and the harmless ones); the C++ that calls a library, a side stream, a thread
or a host sync. tools/legality/static_checks.py walks a candidate's source for them."""

from __future__ import annotations

import re

# Modules whose import alone means the candidate reaches for the judge, the interpreter or the OS.
TAMPER_MODULES = {
    "ctypes": "ctypes (raw memory access)",
    "gc": "gc (reaching other objects in the process)",
    "inspect": "inspect (reading the judge's frames)",
    "importlib": "importlib (loading or reloading modules behind the judge's back)",
    "builtins": "builtins (replacing built-in functions)",
    "kernelfix": "kernelfix (the judge itself)",
    "signal": "signal (signal handlers)",
    "socket": "socket (network access)",
    "subprocess": "subprocess (running other programs)",
    "pickle": "pickle",
    "marshal": "marshal",
    "__main__": "__main__ (the judge's harness)",
}
THREAD_MODULES = {"threading", "multiprocessing", "concurrent", "asyncio", "_thread"}
TAMPER_CALLS = {"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint"}
SYS_ATTRS = {"modules", "_getframe", "settrace", "setprofile", "meta_path", "path_hooks", "addaudithook"}
OS_ATTRS = {
    "kill",
    "killpg",
    "getppid",
    "fork",
    "forkpty",
    "setsid",
    "setpgid",
    "system",
    "popen",
    "dup2",
    "pidfd_open",
    "register_at_fork",
}
OS_PREFIXES = ("exec", "spawn", "posix_spawn")  # execv, execlpe, spawnvp, posix_spawnp, ...


def os_tamper(name: str) -> bool:
    return name in OS_ATTRS or name.startswith(OS_PREFIXES)


TORCH_PRIVATE = re.compile(
    r"^torch\.(_C|_dynamo|_inductor|overrides|profiler|autograd\.profiler|utils\._python_dispatch|_subclasses|fx)\b"
)
STREAM_ATTRS = {"Stream", "stream", "ExternalStream", "StreamContext", "set_stream"}

# torch.* callables that compute nothing (allocation, metadata, context managers, dtypes).
HARMLESS_TORCH = {
    "empty",
    "empty_like",
    "empty_strided",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "arange",
    "tensor",
    "as_tensor",
    "from_numpy",
    "device",
    "dtype",
    "Size",
    "manual_seed",
    "no_grad",
    "inference_mode",
    "is_tensor",
    "numel",
    "get_default_dtype",
    "set_grad_enabled",
    "is_floating_point",
    "promote_types",
    "result_type",
    "finfo",
    "iinfo",
    "broadcast_shapes",
    "Generator",
    "Tensor",
    "randn",
    "rand",
    "randint",
    "cdiv",
    "is_grad_enabled",
    "enable_grad",
}
HARMLESS_TORCH_PREFIXES = (
    "torch.cuda.",
    "torch.utils.cpp_extension.",
    "torch.ops.",
    "torch.nn.Parameter",
    "torch.nn.init.",
    "torch.backends.",
    "torch.Tensor",
)
HARMLESS_NN = {
    "Parameter",
    "ParameterList",
    "ParameterDict",
    "ModuleList",
    "ModuleDict",
    "Identity",
    "Module",
    "Buffer",
}
# Tensor methods that compute (called on any object in the forward path: a warning).
COMPUTE_METHODS = set(
    """sum mean max min amax amin softmax log_softmax exp log matmul mm bmm relu sigmoid tanh add mul sub
    div pow sqrt rsqrt norm var std cumsum cumprod prod clamp clamp_ abs neg argmax argmin topk sort
    gelu silu addmm baddbmm einsum conv2d conv1d conv3d logsumexp erf sin cos maximum minimum where
    add_ mul_ sub_ div_ relu_ masked_fill lerp dot outer addcmul addcdiv""".split()
)
CXX_ATEN = re.compile(
    r"\b(?:at|torch)::(?!cuda\b|Tensor\b|kFloat|kHalf|kBFloat16|kInt|kLong|kCUDA|kCPU|ScalarType|TensorOptions|Device|IntArrayRef|Scalar\b|dtype\b|indexing\b|nn\b)(\w+)\s*\("
)
# C++ that steps around the dispatcher's Python key would hide its aten calls from the op recorder.
CXX_DISPATCH = re.compile(
    r"\b(ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|AutoDispatchBelow\w*|DispatchKeySet|_DisableTorchDispatch|RecordFunctionGuard|enableRecordFunction|tls_set_dispatch_key\w*)\b"
)
CXX_LIBRARY = re.compile(r"\b(cublas\w*|cudnn\w*|cublasLt\w*|at::cuda::blas)\b|#include\s*[<\"](cublas|cudnn)")
CXX_STREAM = re.compile(r"\b(cudaStreamCreate\w*|getStreamFromPool|cudaStreamBeginCapture)\b")
CXX_THREAD = re.compile(r"\b(std::thread|std::async|pthread_create|std::jthread)\b")
# Host syncs: the host waits for the GPU, which then idles until the next launch (tools/profile/host_sync.py
# finds them at run time too). Tensor methods, torch calls, and their C++ forms.
SYNC_METHODS = {"item", "cpu", "tolist", "numpy", "synchronize"}
CXX_SYNC = re.compile(
    r"\b(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|cudaMemcpy(?!Async|ToSymbolAsync|FromSymbolAsync)\w*)\s*\(|\.(item<\w+>|cpu)\(\)"
)
SYNC_FIX = (
    "it makes the host wait for the GPU (a host sync) and the GPU idle until the next launch: keep the value on the GPU "
    "(pass the tensor to the next kernel and read it there) and let the stream order the kernels"
)
