"""The op recorder: every aten op a judged forward dispatches, counted (candidate's worker side).

A ``TorchDispatchMode`` entered around each judged forward call sees every op
that reaches the dispatcher, whether Python or the candidate's C++ called it,
composite ops as what they decompose into (``F.linear`` as ``t`` and ``mm``),
and nothing nested inside an op it saw (the mode is off while an op runs).
Triton's own machinery (the interpreter's copies, the autotuner's benchmarking)
runs with the recorder suspended: it is not the candidate's work.

Before this the recorder was torch.profiler: on an H100 its start took 4.7 s
of every candidate's correctness stage, and it kept every forward's outputs
alive until it stopped (36 GiB after six trials of 19_ReLU). A dispatch mode
starts in microseconds and holds nothing.

Whether the candidate removed the mode (``recorder_intact``) is checked when
each forward returns: the mode must still be the innermost one. Python code
cannot reach torch's dispatch internals (the static checks refuse
``torch._C`` and ``torch.utils._python_dispatch``); C++ sources that exclude
dispatch keys are refused too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode


class OpRecorder(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # Else torch wraps __torch_dispatch__ in torch._disable_dynamo, whose first call imports
        # torch._dynamo: 6 s inside the first judged forward on the H100. Nothing compiles here.
        return False

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.suspended = 0
        self.intact = True

    def __torch_dispatch__(self, func, types, args: Any = (), kwargs: Any = None):
        if not self.suspended:
            self.counts[func._schema.name] += 1  # aten::mul, whatever its overload
        return func(*args, **(kwargs or {}))

    def run(self, fn, *args: Any) -> Any:
        """``fn(*args)`` with the recorder on; marks it broken if ``fn`` took it off the mode stack."""
        self.__enter__()
        try:
            return fn(*args)
        finally:
            if _get_current_dispatch_mode() is self:
                self.__exit__(None, None, None)
            else:  # the stack is no longer ours to unwind
                self.intact = False

    def ops(self) -> dict[str, int]:
        return dict(self.counts)


class Suspended:
    """Triton's launch paths run with the recorder suspended (wrapped by ``suspend_in``)."""

    def __init__(self, recorder: OpRecorder):
        self.recorder = recorder

    def __enter__(self) -> None:
        self.recorder.suspended += 1

    def __exit__(self, *exc: object) -> None:
        self.recorder.suspended -= 1


def suspend_in_triton(recorder: OpRecorder) -> None:
    """Wrap Triton's launch paths so the aten ops Triton runs itself are not counted."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return

    def wrap(cls, attr):
        orig = getattr(cls, attr)

        def run(self, *args, **kwargs):
            with Suspended(recorder):
                return orig(self, *args, **kwargs)

        setattr(cls, attr, run)

    targets = []
    try:
        from triton.runtime.jit import JITFunction

        targets.append((JITFunction, "run"))
    except ImportError:
        pass
    try:
        from triton.runtime.autotuner import Autotuner, Heuristics

        targets += [(Autotuner, "run"), (Heuristics, "run")]
    except ImportError:
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction

        targets.append((InterpretedFunction, "run"))
    except ImportError:
        pass
    for cls, attr in targets:
        wrap(cls, attr)
