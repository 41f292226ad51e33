"""[judge] The build line of a turn's feedback: how long the extension build took and what dominated it.

Built only from what the build recorded for that build (``ExtensionBuild``: per
translation unit its seconds, the torch headers it includes itself, the PCH), so
every sentence is true of that build: the torch-header advice appears only when a
``.cu`` that includes torch headers was the slowest unit, and the time it quotes
for a ``.cu`` without them is a measured median (``compile.times``), with its basis.
"""

from __future__ import annotations

from kernelfix.tools.compile import host_pch
from kernelfix.tools.verdict import ExtensionBuild, UnitBuild, Verdict

_MAX_LINES = 4


def lines(v: Verdict) -> list[str]:
    exts = v.compile.extensions if v.compile else []
    out: list[str] = []
    for ext in exts:
        out += _extension(ext, named=len(exts) > 1)
    return out[:_MAX_LINES]


def _s(x: float) -> str:
    return f"{x:.2g}" if x < 1 else f"{x:.1f}"


def _unit(u: UnitBuild) -> str:
    if u.reused:
        return f"{u.source} reused (compiled in an earlier build)"
    text = f"{u.source} {_s(u.seconds)} s" if u.ok else f"{u.source} failed after {_s(u.seconds)} s"
    if u.compiler == "nvcc" and u.torch_headers:
        text += " (includes " + ", ".join(f"<{h}>" for h in u.torch_headers[:3]) + ")"
    elif u.pch:
        text += " with the precompiled torch header"
    return text


def _extension(ext: ExtensionBuild, named: bool) -> list[str]:
    head = f"Build of {ext.name}" if named else "Build"
    if ext.cached:
        return [f"{head}: {_s(ext.seconds)} s, an identical extension came from the build cache."]
    if ext.kind == "nvrtc":
        return [f"{head}: NVRTC compiled {ext.name} in {_s(ext.seconds)} s."]
    if not ext.units:
        return [f"{head}: {_s(ext.seconds)} s."]
    parts = [_unit(u) for u in ext.units]
    if ext.link_seconds is not None:
        parts.append(f"link {_s(ext.link_seconds)} s")
    made = next((u.pch_made_seconds for u in ext.units if u.pch_made_seconds), None)
    once = f", of which {_s(made)} s built the precompiled torch header (once per machine)" if made else ""
    out = [f"{head} {_s(ext.seconds)} s{once}; translation units in parallel: " + "; ".join(parts) + "."]
    compiled = [u for u in ext.units if not u.reused]
    slowest = max(compiled, key=lambda u: u.seconds, default=None)
    if slowest is None or len(ext.units) < 2:
        return out
    if slowest.compiler == "nvcc" and slowest.torch_headers:
        ref = ext.torch_free_cu
        fast = f" A .cu without torch headers builds in about {_s(ref.seconds)} s ({ref.basis})." if ref else ""
        out.append(
            f"{slowest.source} dominated the build: nvcc parses the torch headers it includes in both its host and device passes.{fast}"
            " Keep cuda_sources to CUDA headers and raw pointers, with the torch-facing wrapper in cpp_sources"
            " (load_inline(..., no_implicit_headers=True))."
        )
    elif slowest.no_pch == host_pch.NOT_FIRST:
        out.append(
            f"{slowest.source} dominated the build, without the precompiled torch header ({slowest.no_pch}): it applies"
            " when cpp_sources begins with #include <torch/extension.h> (blank lines and comments before it are fine)."
        )
    else:
        out.append(f"{slowest.source} dominated the build.")
    return out
