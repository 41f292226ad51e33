"""Run untrusted code in a child process: own cgroup, namespaces and work
directory, scrubbed environment, no capabilities, wall/CPU/memory/process/output
limits, killed as a whole. Results come back over an authenticated pipe, never
over stdout."""

from kernelfix.sandbox.env import scrubbed_env
from kernelfix.sandbox.isolation import Isolation, SandboxReport, credential_paths
from kernelfix.sandbox.probes import probe
from kernelfix.sandbox.process import ChildOutcome, Limits, run_child

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
