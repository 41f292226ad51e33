"""[any] One shared buffer between two of the judge's processes: GPU memory where it can be, else a memfd.

The owner (the reference server) creates an arena and sends ``spec`` plus the
exported fd; the other side opens it with the same spec. Both get a uint8
tensor over the same bytes (``bytes``), and typed views at offsets (``view``).
A ``cuda`` arena lives on the GPU, so a candidate's kernel reads its inputs in
place; a ``host`` arena is a memfd, which on a GPU machine means one copy each
way (used only where the driver refuses to export device memory).
"""

from __future__ import annotations

import mmap
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict

from kernelfix.tools.transport import cuda_vmm

ArenaKind = Literal["cuda", "host"]
ALIGN = 256  # every tensor in an arena starts on a 256-byte boundary (vectorized loads, TMA)


def aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class ArenaSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: ArenaKind
    size: int  # bytes as allocated (a cuda arena is rounded up to the driver's granularity)
    device: int = 0


class Arena:
    """A shared buffer; ``fd`` is set on the owner's side until it is sent (then ``forget_fd``)."""

    def __init__(self, spec: ArenaSpec, bytes_tensor, keep, fd: int | None = None):
        self.spec = spec
        self.bytes = bytes_tensor  # uint8, spec.size long
        self._keep = keep  # what keeps the memory mapped while this object lives (mmap, Mapping)
        self.fd = fd

    @property
    def device(self) -> str:
        return f"cuda:{self.spec.device}" if self.spec.kind == "cuda" else "cpu"

    @classmethod
    def create(cls, size: int, kind: ArenaKind, device: int = 0) -> "Arena":
        size = max(ALIGN, aligned(size))
        if kind == "cuda":
            mapping, fd = cuda_vmm.Mapping.create(size, device)
            spec = ArenaSpec(kind="cuda", size=mapping.size, device=device)
            return cls(spec, cuda_vmm.as_tensor(mapping, device), mapping, fd)
        fd = os.memfd_create("kernelfix-arena", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        return cls(ArenaSpec(kind="host", size=size), _host_tensor(mm), mm, fd)

    @staticmethod
    def allocated_size(size: int, kind: ArenaKind, device: int = 0) -> int:
        """The bytes ``create(size, kind, device)`` allocates (its ``spec.size``)."""
        size = max(ALIGN, aligned(size))
        return cuda_vmm.round_up(size, device) if kind == "cuda" else size

    @classmethod
    def open(cls, spec: ArenaSpec, fd: int) -> "Arena":
        """Map what the owner exported; the fd is closed here (the mapping keeps the memory)."""
        try:
            if spec.kind == "cuda":
                mapping = cuda_vmm.Mapping.open(fd, spec.size, spec.device)
                return cls(spec, cuda_vmm.as_tensor(mapping, spec.device), mapping)
            if os.fstat(fd).st_size < spec.size:
                raise ValueError(f"shared buffer is {os.fstat(fd).st_size} bytes, expected {spec.size}")
            mm = mmap.mmap(fd, spec.size)
            return cls(spec, _host_tensor(mm), mm)
        finally:
            cuda_vmm.close_fd(fd)

    def view(self, offset: int, nbytes: int):
        """``nbytes`` at ``offset`` as a uint8 tensor (the caller reinterprets its dtype)."""
        if offset < 0 or offset + nbytes > self.spec.size:
            raise ValueError(f"bytes {offset}..{offset + nbytes} are outside the {self.spec.size}-byte arena")
        return self.bytes[offset : offset + nbytes]

    def export(self) -> None:
        """The owner's side, once its last fd went: a new fd for the same memory (a GPU arena used again)."""
        if self.spec.kind != "cuda" or self.fd is not None:
            raise ValueError("only a GPU arena whose fd was sent can be exported again")
        self.fd = self._keep.export()

    def forget_fd(self) -> None:
        if self.fd is not None:
            cuda_vmm.close_fd(self.fd)
            self.fd = None

    def release(self) -> None:
        """Drop this side's hold; the memory goes once no tensor viewing it is left."""
        self.forget_fd()
        self.bytes = None
        self._keep = None


def _host_tensor(mm: mmap.mmap):
    import torch

    return torch.frombuffer(mm, dtype=torch.uint8)


def cuda_arenas_work(device: int) -> str | None:
    """None when GPU arenas can be created here; else why not (then host arenas carry the tensors)."""
    try:
        cuda_vmm.ensure_context(device)
        a = Arena.create(1 << 20, "cuda", device)
        a.bytes.fill_(1)
        a.bytes.cpu()  # the fill has run (and faulted here, were the mapping unusable) before release
        a.release()
        return None
    except Exception as e:  # no driver, no VMM support, a refusing virtualization layer
        return f"{type(e).__name__}: {e}"
