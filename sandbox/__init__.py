"""Run untrusted code in a child process: own cgroup, namespaces and work
directory, scrubbed environment, no capabilities, wall/CPU/memory/process/output
limits, killed as a whole. Results come back over an authenticated pipe, never
over stdout."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelfix.sandbox.env import scrubbed_env
    from kernelfix.sandbox.isolation import Isolation, SandboxReport, credential_paths
    from kernelfix.sandbox.probes import probe
    from kernelfix.sandbox.process import ChildOutcome, Limits, run_child

# Exported lazily: every sandboxed child's launcher imports this package (kernelfix.sandbox.launch), and importing
# these names took 0.5 s of its CPU (pydantic's models, in isolation.py) that the launcher never uses.
_LAZY = {
    "scrubbed_env": "kernelfix.sandbox.env",
    "Isolation": "kernelfix.sandbox.isolation",
    "SandboxReport": "kernelfix.sandbox.isolation",
    "credential_paths": "kernelfix.sandbox.isolation",
    "probe": "kernelfix.sandbox.probes",
    "ChildOutcome": "kernelfix.sandbox.process",
    "Limits": "kernelfix.sandbox.process",
    "run_child": "kernelfix.sandbox.process",
}

__all__ = [
    "ChildOutcome",
    "Isolation",
    "Limits",
    "SandboxReport",
    "credential_paths",
    "probe",
    "run_child",
    "scrubbed_env",
]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kernelfix.sandbox' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
