"""What a sandboxed child is kept from: the policy ``run_child`` hands the launcher.

Each layer is asked for; the launcher sets up what the platform allows and
reports the rest as one-line notes (``ChildOutcome.sandbox_notes``), so a
judge on a machine without namespaces still runs, and says what is not
isolated.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

# Where credentials live under a home directory: hidden from candidates (HOME is theirs already).
CREDENTIAL_PATHS = (
    ".ssh",
    ".aws",
    ".azure",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".npmrc",
    ".docker",
    ".kube",
    ".config/gcloud",
    ".config/gh",
    ".config/litellm",
    ".huggingface",
    ".cache/huggingface/token",
    ".bash_history",
    ".python_history",
    ".zsh_history",
    ".env",
    ".config/kernelfix",  # `kernelfix serve`'s token (kernelfix/serve/auth.py)
)


class Isolation(BaseModel):
    """The layers to set up for one child, and what it may write or must not see."""

    model_config = ConfigDict(extra="forbid")

    network: bool = Field(True, description="own network namespace: no interfaces but a downed loopback")
    pid: bool = Field(
        True, description="own PID (and IPC) namespace: cannot see or signal other processes; nothing outlives it"
    )
    filesystem: bool = Field(
        True, description="own mount namespace: read-only everywhere except `writable`; `hidden` covered"
    )
    capabilities: bool = Field(True, description="drop every capability and set no_new_privs")
    cgroup: bool = Field(True, description="own cgroup: hard memory and process-count limits, kill-all")
    writable: list[str] = Field(
        default_factory=list, description="directories the child may write (its work dir, caches)"
    )
    hidden: list[str] = Field(default_factory=list, description="files or directories the child must not read")
    devices: list[str] | None = Field(
        None, description="globs under /dev the child may open; None: the defaults (null, zero, random, tty, nvidia*)"
    )

    @classmethod
    def off(cls) -> "Isolation":
        """No isolation beyond the process session and rlimits (the pre-sandbox behaviour)."""
        return cls(network=False, pid=False, filesystem=False, capabilities=False, cgroup=False)

    def launcher_spec(self) -> dict:
        return self.model_dump(exclude={"cgroup"})


def credential_paths(home: str | Path | None = None, extra_dirs: list[str | Path] = ()) -> list[str]:
    """Existing credential files and directories under ``home`` (default: the user's), and
    ``.env`` files in ``extra_dirs`` (the task's directory, the working directory)."""
    home = Path(home) if home is not None else Path.home()
    found = [home / p for p in CREDENTIAL_PATHS]
    found += [Path(d) / ".env" for d in extra_dirs]
    return sorted({str(p) for p in found if p.exists() or p.is_symlink()})


class SandboxReport(BaseModel):
    """What a sandboxed child actually got on this machine."""

    layers: dict[str, bool] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)

    def has(self, *layers: str) -> bool:
        return all(self.layers.get(layer, False) for layer in layers)


LAYERS = ("network", "pid", "filesystem", "capabilities", "cgroup")
