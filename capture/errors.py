"""Why a capture or a swap did not happen. The CLI maps them to exit codes."""

from __future__ import annotations


class CaptureInputError(Exception):
    """Bad input (exit 2): no such script, the script failed, the module path names nothing, it was never called."""


class CaptureFailed(Exception):
    """A valid module that kernelfix cannot turn into a faithful task (exit 1): export cannot trace it,
    it draws random numbers, or the written task does not reproduce the captured call."""


class Untraceable(CaptureFailed):
    """torch.export cannot trace the module; names the construct and where it is."""

    def __init__(self, message: str, *, construct: str, location: str | None, code: str | None):
        super().__init__(message)
        self.construct = construct
        self.location = location
        self.code = code


class SwapError(Exception):
    """load_best cannot load a kernel: not a session, not a captured task, no correct kernel yet."""


class SwapCheckFailed(SwapError):
    """The loaded kernel does not reproduce the captured call; ``check`` says where."""

    def __init__(self, message: str, check):
        super().__init__(message)
        self.check = check


class CallMismatch(Exception):
    """A call to the swapped-in module that differs from the captured one (structure, shape, dtype, a fixed value)."""
