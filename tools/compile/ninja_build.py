"""[candidate worker, one-shot child] Build what torch's cpp_extension wrote into build.ninja, faster, with the same result.

torch's ``load_inline``/``load`` write the sources and a build.ninja, then call
``_run_ninja_build``; :func:`run` takes that call's place (see ``build.install``).
It reads the same build.ninja and runs the same commands, with these levers,
each switchable in :class:`~kernelfix.tools.config.BuildOptions`:

- ``cache``: the finished ``.so`` is stored under a key covering everything that
  decides it (the build.ninja with its flags, compilers, arch flags and paths;
  the sources; local headers; compiler, torch and Python identities; this
  scheme's version), and an identical build anywhere later is a file copy;
- ``object_cache``: the same per translation unit, so a new kernel with the
  same binding (or the reverse) compiles one TU, not two;
- ``host_pch``: the binding TU loads a precompiled ``torch/extension.h``;
- ``split_nvcc``: nvcc's host and device front ends run in parallel.

Each extension's record says what every translation unit took, which torch
headers it includes and whether it used the PCH (the build feedback quotes it),
and each fresh compile is added to this machine's build times
(:mod:`~kernelfix.tools.compile.times`).

Builds of the same key are serialized by a file lock, so concurrent identical
builds compile once. A failed build raises the same ``RuntimeError`` torch
would, with ninja-style ``FAILED:`` blocks, so the judge classifies it as before.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kernelfix.base.cache_dir import BUILD_CACHE, cache_root
from kernelfix.tools.compile import host_pch, ninja_file, nvcc_pipeline
from kernelfix.tools.compile import times as build_times
from kernelfix.tools.compile.store import Store, digest, file_sha256
from kernelfix.tools.compile.toolchain import python_abi, tool_identity, torch_identity
from kernelfix.tools.config import BuildOptions
from kernelfix.tools.verdict import ExtensionBuild, UnitBuild

BUILD_SCHEME = 1
_LOCAL_HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc", ".inl", ".ipp", ".tcc")
_HEADER_DIR_LIMITS = (500, 64 << 20)  # files, bytes: beyond these an include dir is not hashed and nothing is cached


@dataclass
class _Stores:
    ext: Store
    obj: Store
    pch: Store

    @classmethod
    def under(cls, root: Path) -> "_Stores":
        b = root / BUILD_CACHE
        return cls(ext=Store(b / "ext"), obj=Store(b / "obj"), pch=Store(b / "pch"))


@dataclass
class _EdgeResult:
    ok: bool
    output: str = ""
    reused: bool = False
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # the compile's wall time, less a one-time PCH build
    pch: host_pch.PchUse | None = None
    no_pch: str | None = None  # the PCH was on offer but not used: why


class BuildFailed(RuntimeError):
    pass


def _header_digest(dirs: list[Path], build_dir: Path) -> str | None:
    """Contents of headers the compile may read that no version string covers:
    user include dirs and headers next to the sources. None: too many to hash."""
    files: list[tuple[str, str]] = []
    total = 0
    for d in dirs:
        if not d.is_dir():
            continue
        for p in sorted(d.rglob("*")):
            if p.is_file():
                total += p.stat().st_size
                files.append((str(p), file_sha256(p)))
                if len(files) > _HEADER_DIR_LIMITS[0] or total > _HEADER_DIR_LIMITS[1]:
                    return None
    for p in sorted(build_dir.iterdir()):
        if p.is_file() and p.suffix in _LOCAL_HEADER_SUFFIXES:
            files.append((p.name, file_sha256(p)))
    return digest(files)


def _user_include_dirs(edges: list[ninja_file.Edge]) -> list[Path]:
    """``-I`` directories (torch passes user include paths with -I, its own with -isystem)."""
    dirs: set[str] = set()
    for e in edges:
        if e.rule not in ("compile", "cuda_compile"):
            continue
        argv = shlex.split(e.command)
        for i, a in enumerate(argv):
            if a == "-I" and i + 1 < len(argv):
                dirs.add(argv[i + 1])
            elif a.startswith("-I") and len(a) > 2:
                dirs.add(a[2:])
    return [Path(d) for d in sorted(dirs)]


def _tools(edges: list[ninja_file.Edge]) -> list[str]:
    return sorted({tool_identity(shlex.split(e.command)[0]) for e in edges if e.command.strip()})


class _Build:
    def __init__(
        self, build_dir: Path, edges: list[ninja_file.Edge], options: BuildOptions, stores: _Stores, verbose: bool
    ):
        self.dir = build_dir
        self.edges = edges
        self.options = options
        self.stores = stores
        self.verbose = verbose
        self.log: list[str] = []
        self.notes: list[str] = []
        self.built = 0
        self.reused = 0
        self.units: list[UnitBuild] = []
        self.link_seconds: float | None = None
        self._common: str | None = None  # what every key shares; "": not cacheable

    def common_key(self) -> str | None:
        if self._common is None:
            headers = _header_digest(_user_include_dirs(self.edges), self.dir)
            self._common = (
                ""
                if headers is None
                else digest(
                    "kernelfix-build", BUILD_SCHEME, _tools(self.edges), torch_identity(), python_abi(), headers
                )
            )
        return self._common or None

    def _normalized(self, command: str) -> str:
        return command.replace(str(self.dir), "<build>")

    def _source_digests(self, edge: ninja_file.Edge) -> list[str]:
        return [file_sha256(Path(p)) for p in edge.inputs]

    # ------------------------------------------------------------------ one edge

    def _run_shell(self, command: str) -> tuple[bool, str]:
        r = subprocess.run(["/bin/sh", "-c", command], cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        return r.returncode == 0, r.stdout.decode("utf-8", "replace")

    def _compile(self, edge: ninja_file.Edge) -> _EdgeResult:
        out = self.dir / edge.outputs[0]
        common = self.common_key() if self.options.object_cache else None
        if common is None:
            return self._compile_now(edge)
        key = digest("obj", common, edge.rule, self._normalized(edge.command), self._source_digests(edge))
        obj = self.stores.obj
        if obj.fetch_file(key, out):
            return _EdgeResult(ok=True, reused=True)
        with obj.lock(key):
            if obj.fetch_file(key, out):
                return _EdgeResult(ok=True, reused=True)
            obj.discard(key)
            res = self._compile_now(edge)
            if res.ok:
                obj.put_file(key, out)
        return res

    def _compile_now(self, edge: ninja_file.Edge) -> _EdgeResult:
        t0 = time.monotonic()
        notes: list[str] = []
        if edge.rule == "cuda_compile" and self.options.split_nvcc:
            r = nvcc_pipeline.compile_split(shlex.split(edge.command), self.dir, dict(os.environ))
            if r.mode == "split":
                notes.append(
                    "nvcc front ends in parallel; nvcc steps: "
                    + ", ".join(f"{s.tool} {s.seconds:.1f}s" for s in r.steps)
                )
            else:
                notes.append(r.note or "plain nvcc")
            return _EdgeResult(ok=r.ok, output=r.output, notes=notes, seconds=time.monotonic() - t0)
        command = edge.command
        pch = no_pch = None
        if edge.rule == "compile" and self.options.host_pch and edge.inputs:
            try:
                pch = host_pch.include_args(command, Path(edge.inputs[0]), self.stores.pch)
            except host_pch.PchError as e:
                no_pch = str(e).splitlines()[0][:200]
                notes.append(no_pch)
            if pch:
                command = f"{command} {shlex.join(pch.args)}"
                made = (
                    f" (built it first: {pch.made_seconds:.1f}s, once per machine and flags)"
                    if pch.made_seconds is not None
                    else ""
                )
                notes.append("precompiled torch/extension.h" + made)
        ok, output = self._run_shell(command)
        seconds = time.monotonic() - t0 - (pch.made_seconds if pch and pch.made_seconds else 0.0)
        return _EdgeResult(ok=ok, output=output, notes=notes, seconds=seconds, pch=pch, no_pch=no_pch)

    def _unit(self, edge: ninja_file.Edge, r: _EdgeResult) -> UnitBuild:
        """What one TU's compile took and what it includes; a fresh success also joins this machine's build times."""
        compiler = "nvcc" if edge.rule == "cuda_compile" else "c++"
        source = Path(edge.inputs[0]) if edge.inputs else None
        try:
            text = source.read_text(errors="replace") if source else ""
        except OSError:
            text = ""
        headers = build_times.torch_includes(text)
        no_pch = r.no_pch
        if (
            compiler == "c++"
            and self.options.host_pch
            and "torch/extension.h" in headers
            and not host_pch.begins_with_torch_extension(text)
        ):
            no_pch = host_pch.NOT_FIRST
        unit = UnitBuild(
            source=source.name if source else edge.outputs[0],
            compiler=compiler,
            seconds=round(r.seconds, 3),
            ok=r.ok,
            reused=r.reused,
            torch_headers=headers,
            pch=r.pch is not None,
            pch_made_seconds=r.pch.made_seconds if r.pch else None,
            no_pch=no_pch if r.pch is None and not r.reused else None,
        )
        if r.ok and not r.reused:
            build_times.record(build_times.layout_of(compiler, headers, unit.pch), r.seconds)
        return unit

    def record(self, name: str, t0: float, *, cached: bool = False, notes: list[str] | None = None) -> ExtensionBuild:
        torch_cu = any(u.compiler == "nvcc" and u.torch_headers and not u.reused for u in self.units)
        return ExtensionBuild(
            name=name,
            cached=cached,
            seconds=round(time.monotonic() - t0, 3),
            objects_built=self.built,
            objects_reused=self.reused,
            units=self.units,
            link_seconds=self.link_seconds,
            torch_free_cu=build_times.reference("cu_plain") if torch_cu else None,
            notes=self.notes if notes is None else notes,
        )

    # ------------------------------------------------------------------ the whole graph

    def run(self) -> None:
        compiles = [e for e in self.edges if e.rule in ("compile", "cuda_compile")]
        rest = [e for e in self.edges if e not in compiles]
        n = len(self.edges)
        failures: list[str] = []
        workers = _workers()
        for i, e in enumerate(compiles):
            self.log.append(f"[{i + 1}/{n}] {e.command}")
        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(compiles) or 1))) as pool:
            results = list(pool.map(self._compile, compiles))
        for e, r in zip(compiles, results):
            self.units.append(self._unit(e, r))
            self.notes += [f"{e.outputs[0]}: {note}" for note in r.notes]
            if r.reused:
                self.reused += 1
                self.notes.append(f"{e.outputs[0]}: reused from the object cache")
            elif r.ok:
                self.built += 1
            if r.output:
                self.log.append(r.output.rstrip("\n"))
            if not r.ok:
                failures.append(f"FAILED: {' '.join(e.outputs)} \n{e.command}\n{r.output.rstrip()}")
        if failures:
            raise BuildFailed("\n".join(self.log + failures + ["ninja: build stopped: subcommand failed."]) + "\n")
        for i, e in enumerate(rest, start=len(compiles)):
            self.log.append(f"[{i + 1}/{n}] {e.command}")
            t0 = time.monotonic()
            ok, output = self._run_shell(e.command)
            self.link_seconds = round((self.link_seconds or 0.0) + time.monotonic() - t0, 3)
            if output:
                self.log.append(output.rstrip("\n"))
            if not ok:
                raise BuildFailed(
                    "\n".join(
                        self.log
                        + [
                            f"FAILED: {' '.join(e.outputs)} \n{e.command}\n{output.rstrip()}",
                            "ninja: build stopped: subcommand failed.",
                        ]
                    )
                    + "\n"
                )


def _workers() -> int:
    jobs = os.environ.get("MAX_JOBS")
    if jobs and jobs.isdigit() and int(jobs) > 0:
        return int(jobs)
    return (os.cpu_count() or 2) + 2  # ninja's default


def run(
    build_directory: str,
    verbose: bool,
    error_prefix: str,
    *,
    options: BuildOptions,
    record: Callable[[ExtensionBuild], None],
    fallback: Callable[[str, bool, str], None],
) -> None:
    """Build ``build_directory``/build.ninja; signature of torch's ``_run_ninja_build`` plus kernelfix's options."""
    t0 = time.monotonic()
    bd = Path(build_directory)
    parsed = ninja_file.parse((bd / "build.ninja").read_text())
    if parsed is None or any(e.rule not in ("compile", "cuda_compile", "link") for e in parsed[0]):
        return fallback(build_directory, verbose, error_prefix)
    edges, _ = parsed
    links = [e for e in edges if e.rule == "link"]
    target = links[0].outputs[0] if len(links) == 1 else None
    name = Path(target).stem if target else bd.name
    build = _Build(bd, edges, options, _Stores.under(cache_root()), verbose)
    try:
        key = None
        if options.cache and target and build.common_key() is not None:
            ninja_text = build._normalized((bd / "build.ninja").read_text())
            sources = sorted((Path(p).name, file_sha256(Path(p))) for e in edges if e.rule != "link" for p in e.inputs)
            key = digest("ext", build.common_key(), ninja_text, sources)
        if key is None:
            build.run()
        else:
            ext = build.stores.ext
            if ext.fetch_file(key, bd / target):
                record(build.record(name, t0, cached=True, notes=[]))
                return
            with ext.lock(key):
                if ext.fetch_file(key, bd / target):
                    record(build.record(name, t0, cached=True, notes=["waited for a concurrent identical build"]))
                    return
                ext.discard(key)
                build.run()
                ext.put_file(key, bd / target)
    except BuildFailed as e:
        record(build.record(name, t0))
        raise RuntimeError(f"{error_prefix}: {e}") from None
    if verbose:
        print("\n".join(build.log), flush=True)
    record(build.record(name, t0))
