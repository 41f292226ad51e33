"""[judge, candidate worker, one-shot child] Measured compile times per source layout: what the prompt and the build feedback quote (prompts/blocks.py, tools/feedback/build_feedback.py).

A CUDA candidate's build time is decided by its layout, not its kernel: nvcc on a
``.cu`` that includes the torch headers parses them twice (host and device front
ends), while a ``.cu`` with only CUDA headers builds in about a second, and the
binding TU (``#include <torch/extension.h>`` first) loads kernelfix's precompiled
header. Every translation unit kernelfix compiles (not reused) adds one line, its
layout and wall seconds, to ``$KERNELFIX_CACHE/build/times/<machine>.jsonl``; the
median of this machine's last builds is what gets quoted. Until a layout has
``MIN_SAMPLES`` builds here, the figures kernelfix ships stand in, each saying where
it was measured. Lines are appended by the judge's children, so they are parsed
strictly and a median, not a mean, is taken (one bad line cannot move it).
"""

from __future__ import annotations

import functools
import json
import os
import re
import statistics
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kernelfix.base.cache_dir import BUILD_CACHE, cache_root
from kernelfix.tools.compile.store import digest
from kernelfix.tools.verdict import BuildTimeRef

# cu_torch: a .cu that includes torch headers; cu_plain: one that does not;
# host_pch / host_torch: the binding TU with / without the precompiled torch header;
# host_plain: a C++ TU without torch headers.
Layout = Literal["cu_torch", "cu_plain", "host_pch", "host_torch", "host_plain"]
MIN_SAMPLES = 3
_WINDOW = 50  # the latest builds of a layout that count

# Measured on kernelfix's 2-core CI box (nvcc 13.0, torch 2.13), relu candidate, one TU at a
# time: docs/compile.md, "Where a cold build's time goes" (host_pch: the binding TU with the
# precompiled header, same section).
_SHIPPED_BASIS = "measured by kernelfix on a 2-core CPU box with nvcc 13.0, docs/compile.md"
SHIPPED: dict[str, float] = {"cu_torch": 61.4, "cu_plain": 0.65, "host_torch": 16.4, "host_pch": 6.5}

_TORCH_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]((?:torch|ATen|c10|caffe2)/[^>"]+)[>"]', re.M)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


class _Sample(BaseModel):
    model_config = ConfigDict(extra="forbid")

    layout: Layout
    seconds: float = Field(gt=0, lt=3600)


def torch_includes(source: str) -> list[str]:
    """The torch headers (torch/, ATen/, c10/) a source includes itself, in order, comments ignored."""
    seen: dict[str, None] = {}
    for m in _TORCH_INCLUDE.finditer(_COMMENT.sub("", source)):
        seen.setdefault(m.group(1), None)
    return list(seen)


def layout_of(compiler: str, torch_headers: list[str], pch: bool) -> Layout:
    if compiler == "nvcc":
        return "cu_torch" if torch_headers else "cu_plain"
    if pch:
        return "host_pch"
    return "host_torch" if torch_headers else "host_plain"


@functools.lru_cache(maxsize=1)
def _machine() -> str:
    """Builds on this machine and toolchain: the CPUs this process may use, torch, nvcc."""
    from kernelfix.tools.compile.toolchain import find_cuda_home, tool_identity, torch_identity

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    home = find_cuda_home()
    nvcc = tool_identity(str(Path(home) / "bin" / "nvcc")) if home else None
    return digest("build-times", cpus, torch_identity(), nvcc)[:16]


def _log() -> Path:
    return cache_root() / BUILD_CACHE / "times" / f"{_machine()}.jsonl"


def record(layout: Layout, seconds: float) -> None:
    """Add one measured compile; a failure to write only loses the sample."""
    try:
        line = _Sample(layout=layout, seconds=round(seconds, 3)).model_dump_json() + "\n"
        path = _log()
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one short write to an O_APPEND file: lines never interleave
        finally:
            os.close(fd)
    except (OSError, ValidationError):
        pass


def _samples() -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    try:
        lines = _log().read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            s = _Sample.model_validate(json.loads(line))
        except (ValueError, ValidationError):
            continue
        out.setdefault(s.layout, []).append(s.seconds)
    return out


def reference(layout: Layout) -> BuildTimeRef | None:
    """This machine's median for ``layout`` when it has enough builds, else kernelfix's shipped figure."""
    got = _samples().get(layout, [])[-_WINDOW:]
    if len(got) >= MIN_SAMPLES:
        return BuildTimeRef(
            seconds=round(statistics.median(got), 2), basis=f"median of {len(got)} builds on this machine"
        )
    if layout in SHIPPED:
        return BuildTimeRef(seconds=SHIPPED[layout], basis=_SHIPPED_BASIS)
    return None
