"""[candidate worker] The op recorder: every aten op a judged forward dispatches, counted (candidate's worker side).

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

Under --backward the mode is on over the judge's ``backward`` call too, and keeps
those ops apart (``backward_ops``). It counts what the candidate's backward runs:
the code inside its ``torch.autograd.Function.backward`` (marked by wrapping
``BackwardCFunction.apply``, the engine's Python entry into it) and torch's own
derivative formulas for ops the candidate's forward called (a node of torch's, an
``expand``'s ``sum``), and hooks (a tensor's hook runs under the node it precedes,
before that node's backward). Not the engine's bookkeeping: what runs under a custom
Function's node once its backward returned (the engine summing two gradients of one
tensor, casting one to its input's dtype). ``AccumulateGrad`` into a ``.grad`` the
judge set to None steals the gradient or detaches/clones it: allowed ops, so it is
counted like the rest (a hook there computing is caught). The judge passes the
cotangent itself, so no seed gradient is made.

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
        self.backward_counts: Counter[str] = Counter()
        self.in_backward = False  # the judge's backward call is running
        self.in_function_backward = 0  # inside a custom Function's backward (BackwardCFunction.apply)
        self.returned: set[int] = set()  # custom Functions' nodes whose backward has returned (this backward call)

    def __torch_dispatch__(self, func, types, args: Any = (), kwargs: Any = None):
        if not self.suspended:
            if not self.in_backward:
                self.counts[func._schema.name] += 1  # aten::mul, whatever its overload
            elif self._candidates():
                self.backward_counts[func._schema.name] += 1
        return func(*args, **(kwargs or {}))

    def _candidates(self) -> bool:
        """Whether an op dispatched during backward is the candidate's work, not the engine's bookkeeping."""
        if self.in_function_backward:
            return True
        import torch
        from torch.autograd.function import BackwardCFunction

        node = torch._C._current_autograd_node()
        if node is None:
            return False  # the engine's own setup
        if isinstance(node, BackwardCFunction):
            return id(node) not in self.returned  # before its backward: a hook; after: the engine's work
        return True

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

    def run_backward(self, fn, *args: Any) -> Any:
        """The judge's backward call with the recorder on, its ops kept apart."""
        self.in_backward = True
        self.returned.clear()
        try:
            return self.run(fn, *args)
        finally:
            self.in_backward = False
            self.returned.clear()

    def ops(self) -> dict[str, int]:
        return dict(self.counts)

    def backward_ops(self) -> dict[str, int]:
        return dict(self.backward_counts)


def mark_function_backward(recorder: OpRecorder) -> None:
    """Count a custom Function's backward as the candidate's (the engine calls it through these)."""
    from torch.autograd.function import BackwardCFunction

    def wrap(attr: str) -> None:
        orig = getattr(BackwardCFunction, attr, None)
        if orig is None:
            return

        def run(self, *args, **kwargs):
            recorder.in_function_backward += 1
            try:
                return orig(self, *args, **kwargs)
            finally:
                recorder.in_function_backward -= 1
                recorder.returned.add(id(self))

        setattr(BackwardCFunction, attr, run)

    wrap("apply")
    wrap("apply_boxed")


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
