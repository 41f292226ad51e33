"""[any] A task's tensor sizes, counted on the meta device: shapes and dtypes, no memory, no compute.

The reference worker counts them before it allocates anything, so a task that cannot fit the
machine is refused in a second with its sizes named (19_ReLU's 6 GiB in and 6 GiB out,
45_Average_Pooling_2D's 16 GiB in), not after minutes of allocating up to a limit.
A task whose code does not run on the meta device (a ``.cuda()`` in ``get_inputs``, an op
with no meta kernel, a value read back with ``.item()``) has no count: the judge then learns
its size from the real run.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from pydantic import BaseModel

T = TypeVar("T")
GiB = 2**30


class TaskSize(BaseModel):
    """One trial's tensors: what ``get_inputs()`` returns and what ``Model.forward`` returns."""

    input_bytes: int
    output_bytes: int

    @property
    def trial_bytes(self) -> int:
        """The least one trial holds at once: its inputs and its outputs."""
        return self.input_bytes + self.output_bytes

    def describe(self) -> str:
        return f"inputs {size_text(self.input_bytes)}, outputs {size_text(self.output_bytes)}"


def size_text(n: float) -> str:
    """Bytes for a message, three significant digits: 6 GiB, 0.75 GiB, 17.7 GiB, 135 MiB."""
    return f"{n / GiB:.3g} GiB" if n >= GiB / 4 else f"{n / 2**20:.3g} MiB"


def tensor_bytes(obj: Any) -> int:
    """Bytes of every tensor in nested lists, tuples and dicts (anything else counts 0)."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(o) for o in obj.values())
    return 0


class _DynamoStub(ModuleType):
    """Stands in for ``torch._dynamo`` while meta-device work runs: ``disable(fn)`` is ``fn`` (dynamo is
    not compiling anything here), and any other use of it is noted, so the work runs again with the real one."""

    def __init__(self) -> None:
        super().__init__("torch._dynamo")
        self.disabled: list[Any] = []
        self.touched = False

    def disable(self, fn: Any = None, recursive: bool = True, **kwargs: Any) -> Any:
        if fn is None or kwargs.get("reason") is not None or not callable(fn):
            self.touched = True
            raise AttributeError("torch._dynamo.disable: not here")
        self.disabled.append(fn)
        return fn

    def __getattr__(self, name: str) -> Any:
        self.touched = True
        raise AttributeError(f"torch._dynamo.{name}: not here")


def without_dynamo(fn: Callable[[], T]) -> T:
    """``fn()``, meta-device work, without importing ``torch._dynamo``.

    torch's Python decompositions (the meta device's elementwise ops, a dispatch mode such as the flop
    counter) are wrapped in ``torch._disable_dynamo``, whose first call imports torch._dynamo: 1-3 s,
    on the reference worker's way to its first trial, for a count that never compiles anything. Here
    a stub answers that import for the length of ``fn``; what it disabled is reverted after (the next
    call imports the real module, as before). Where ``fn`` needed more of dynamo than ``disable``, it
    runs again with the real one: the answer is always what it was."""
    import sys

    import torch

    if "torch._dynamo" in sys.modules:
        return fn()
    stub = _DynamoStub()
    sys.modules["torch._dynamo"] = stub
    torch._dynamo = stub  # type: ignore[attr-defined]
    result: Any = None
    try:
        result = fn()
    except BaseException:
        if not stub.touched:
            raise  # its own failure, whatever dynamo is
    finally:
        if sys.modules.get("torch._dynamo") is stub:
            del sys.modules["torch._dynamo"]
        if torch.__dict__.get("_dynamo") is stub:
            del torch._dynamo  # type: ignore[attr-defined]
        for f in stub.disabled:
            getattr(f, "__dict__", {}).pop(
                "__dynamo_disable", None
            )  # torch._disable_dynamo's cache of the stub's answer
    return fn() if stub.touched else result


def on_meta(task: Any) -> TaskSize | None:
    """``task``: the imported module (Model, get_inputs, get_init_inputs). None when its code does not
    run on the meta device. Factory calls on meta draw no random numbers, so the real run's seeded
    draws are unchanged. A task with get_input_sets() counts its largest set: every set is a trial
    the judge runs, so the largest bounds what one trial holds."""
    return without_dynamo(lambda: _on_meta(task))


def _on_meta(task: Any) -> TaskSize | None:
    import torch

    try:
        with torch.device("meta"), torch.no_grad():
            inputs = task.get_inputs()
            model = task.Model(*task.get_init_inputs())
            out = model(*inputs)
    except Exception:
        return None
    size = TaskSize(input_bytes=tensor_bytes(inputs), output_bytes=tensor_bytes(out))
    sets = getattr(task, "get_input_sets", None)
    if callable(sets):
        try:
            with torch.device("meta"), torch.no_grad():
                for more in sets():
                    other = TaskSize(input_bytes=tensor_bytes(more), output_bytes=tensor_bytes(model(*more)))
                    size = max(size, other, key=lambda s: s.trial_bytes)
        except Exception:  # a set the meta device cannot run: get_inputs()'s count stands
            pass
    return size if size.trial_bytes > 0 else None


def flops_on_meta(task: Any) -> float | None:
    """Matmul/conv FLOPs of one forward of the task's Model, counted by torch on the meta device
    (no memory, no kernels, no random numbers drawn). None when its code does not run on meta."""
    return without_dynamo(lambda: _flops_on_meta(task))


def _flops_on_meta(task: Any) -> float | None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.device("meta"):
            model = task.Model(*task.get_init_inputs())
            inputs = task.get_inputs()
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(*inputs)
        return float(counter.get_total_flops())
    except Exception:
        return None
