"""Run untrusted code in a child process: own process group, scrubbed
environment, own work directory, wall/CPU/memory/output limits, killed as a
group. Results come back over a dedicated pipe, never over stdout."""

from kernelfix.sandbox.env import scrubbed_env
from kernelfix.sandbox.process import ChildOutcome, Limits, run_child

__all__ = ["ChildOutcome", "Limits", "run_child", "scrubbed_env"]
