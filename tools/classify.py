"""[judge] Name what went wrong in a stage's child process: a category and a short message.

Works from what the parent saw (exit status, signal, timeouts, the child's
structured error message, stderr), never from what the candidate printed on
stdout.
"""

from __future__ import annotations

import re
from pathlib import Path

from kernelfix.sandbox import ChildOutcome
from kernelfix.tools.task_size import size_text
from kernelfix.tools.verdict import Category

_CUDA_PATTERNS: list[tuple[re.Pattern[str], Category, str]] = [
    (
        re.compile(
            r"illegal memory access|misaligned address|address space|address out of bounds|cudaErrorIllegalAddress",
            re.I,
        ),
        Category.ILLEGAL_MEMORY_ACCESS,
        "illegal memory access",
    ),
    # not "device-side assertions": torch appends that hint to every CUDA error
    (
        re.compile(r"device-side assert triggered|device side assert triggered|cudaErrorAssert", re.I),
        Category.DEVICE_ASSERT,
        "device-side assert",
    ),
    (
        re.compile(
            r"unspecified launch failure|too many resources requested for launch|invalid configuration argument|no kernel image is available|launch timed out|named symbol not found",
            re.I,
        ),
        Category.LAUNCH_FAILURE,
        "kernel launch failure",
    ),
    (
        re.compile(
            r"CUDA out of memory|out of memory|OutOfMemoryError|can.t allocate memory|Cannot allocate memory", re.I
        ),
        Category.OOM,
        "out of memory",
    ),
    (
        re.compile(r"CUDA error|CUDA driver error|cudaError|AcceleratorError|Triton Error \[CUDA\]", re.I),
        Category.CUDA_ERROR,
        "CUDA error",
    ),
]

_ERROR_LINE = re.compile(
    r"(error|undefined reference|undefined symbol|cannot find -l|multiple definition|ld returned)", re.I
)
_LOCATED = re.compile(r"(?P<file>[^\s:()]+\.(?:cu|cpp|cc|cuh|h))(?:\((?P<l1>\d+)\)|:(?P<l2>\d+)(?::\d+)?)")


class Failure:
    def __init__(self, category: Category, message: str, details: list[str] | None = None):
        self.category = category
        self.message = message
        self.details = details or []


def cuda_category(text: str) -> tuple[Category, str] | None:
    for pattern, cat, label in _CUDA_PATTERNS:
        if pattern.search(text):
            return cat, label
    return None


def _first_line(text: str, limit: int = 300) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


_PATHISH = re.compile(r"(?:/[^\s:()\"']+/)+(?=[^/\s:()\"']+)")


def _short(line: str) -> str:
    """Paths of the judge's build directories mean nothing to the model: keep file names."""
    return _PATHISH.sub("", line)


def build_errors(log: str, build_dir: Path | None = None, limit: int = 14) -> list[str]:
    """The compiler's error lines, each followed by the offending source lines when they can be found."""
    out: list[str] = []
    seen = set()
    for raw in log.splitlines():
        line = raw.rstrip()
        if not _ERROR_LINE.search(line) or line.startswith(("FAILED:", "ninja: build stopped")) or line in seen:
            continue
        if "Error building extension" in line or re.search(r"errors? detected in the compilation", line):
            continue
        seen.add(line)
        out.append(_short(line)[:400])
        m = _LOCATED.search(line)
        if m and build_dir is not None:
            out += [f"    {n:>4} | {text}" for n, text in _source_lines(build_dir, m["file"], int(m["l1"] or m["l2"]))]
        if len(out) >= limit:
            out.append("    ... (more errors in the full log)")
            break
    return out


def _source_lines(build_dir: Path, file: str, lineno: int) -> list[tuple[int, str]]:
    """The reported line and the one before it (a missing ';' is reported on the next line).

    Read only from a regular file inside the build dir: the dir is candidate-written,
    and a planted symlink or FIFO must not leak the judge's files or stall it."""
    if not build_dir.is_dir() or build_dir.is_symlink():
        return []
    root = build_dir.resolve()
    p = Path(file)
    candidates = [p] if p.is_absolute() else []
    candidates += list(build_dir.rglob(p.name))[:3]
    for c in candidates:
        if c.is_symlink() or not c.is_file() or not c.resolve().is_relative_to(root) or c.stat().st_size > 16 << 20:
            continue
        try:
            lines = c.read_text(errors="replace").splitlines()
        except OSError:
            continue
        if 0 < lineno <= len(lines):
            return [(n, lines[n - 1].rstrip()[:200]) for n in range(max(1, lineno - 1), lineno + 1)]
    return []


def _build_category(text: str) -> Category:
    failed = [line for line in text.splitlines() if line.startswith("FAILED:")]
    joined = " ".join(failed)
    if re.search(r"\.cuda\.o|\.cu\b", joined):
        return Category.NVCC
    if re.search(r"\.so\b", joined) or re.search(r"undefined reference|ld returned|cannot find -l", text):
        return Category.LINK
    if re.search(r"\.o\b|\.cpp\b", joined):
        return Category.HOST_CXX
    if "nvcc" in text:
        return Category.NVCC
    return Category.HOST_CXX


def classify(
    stage: str,
    outcome: ChildOutcome,
    *,
    timeout_s: float,
    build_dir: Path | None = None,
    trial_bytes: int | None = None,
) -> Failure:
    """Why the stage's child did not deliver a result."""
    if outcome.launch_error:
        return Failure(Category.SANDBOX, f"could not start the {stage} worker: {outcome.launch_error}")
    if outcome.forged_messages:
        n = len(outcome.forged_messages)
        return Failure(
            Category.TAMPERING,
            f"wrote {n} forged message{'s' if n > 1 else ''} on the judge's result channel",
            [f"forged: {m[:160]}" for m in outcome.forged_messages[:3]],
        )
    if outcome.output_exceeded:
        total = (outcome.stdout_bytes + outcome.stderr_bytes) / 2**20
        return Failure(
            Category.RESOURCE_LIMIT,
            f"printed {total:.0f} MiB to stdout/stderr during {_phase(outcome) or stage}, over the output limit (killed)",
        )
    if outcome.process_limit_hit:
        return Failure(
            Category.RESOURCE_LIMIT,
            f"tried to run more processes or threads than the limit allows during {_phase(outcome) or stage} (a fork bomb, or a thread per element?)",
        )
    if outcome.timed_out:
        # A hang (no progress, no compiler running) is the code's runtime fault even at import;
        # a build that outran the compile limit is a compile timeout.
        cat = Category.COMPILE_TIMEOUT if stage == "compile" and not outcome.hung else Category.RUN_TIMEOUT
        return Failure(cat, f"{outcome.deadline or f'{stage} did not finish within {timeout_s:g} s'} (killed)")
    fault = machine_fault(outcome, trial_bytes=trial_bytes)
    if fault is not None:
        return fault
    if outcome.memory_exceeded:
        return Failure(
            Category.OOM, f"host memory use passed the limit (peak {outcome.peak_rss_bytes / 2**30:.1f} GiB); killed"
        )
    err = outcome.last("error")
    if err is not None:
        return _from_error(stage, err, build_dir)
    stderr = outcome.stderr_tail
    if outcome.signal in ("SIGXCPU",):
        return Failure(Category.RUN_TIMEOUT, "CPU time limit exceeded (killed)")
    if outcome.signal in ("SIGXFSZ",):
        return Failure(Category.RESOURCE_LIMIT, "wrote a file above the size limit (killed)")
    cuda = cuda_category(stderr)
    if cuda is not None:
        return Failure(cuda[0], f"{cuda[1]}: {_last_cuda_line(stderr)}")
    if outcome.signal:
        return Failure(
            Category.CRASH,
            f"the process died of {outcome.signal}" + (f" during {_phase(outcome)}" if _phase(outcome) else ""),
        )
    if outcome.last("hello") is None:
        return Failure(
            Category.WORKER,
            f"the {stage} worker failed before it started: {_first_line(stderr) or f'exit code {outcome.returncode}'}",
        )
    return Failure(
        Category.EXIT,
        f"the process exited (code {outcome.returncode}) during {_phase(outcome) or stage} without reporting: "
        "the candidate called exit or os._exit",
    )


_NO_SPACE = re.compile(r"No space left on device|ENOSPC|Disk quota exceeded", re.I)
_GPU_GONE = re.compile(
    r"CUDA-capable device\(s\) is/are busy or unavailable|cudaErrorDevicesUnavailable|GPU has fallen off the bus|"
    r"uncorrectable ECC error|cudaErrorECCUncorrectable|cudaErrorSystemNotReady|no CUDA-capable device is detected",
    re.I,
)
DISK_FREE_MIN = 256 << 20  # below this much free space a failed write is the disk's fault


def min_free_space(paths: list[Path | None]) -> int:
    """The least free space among the filesystems the judge writes: these paths, the cache, the temp dir."""
    import shutil
    import tempfile

    from kernelfix.base.cache_dir import cache_root

    free = []
    for p in [*paths, cache_root(), Path(tempfile.gettempdir())]:
        while p is not None and not p.exists() and p != p.parent:
            p = p.parent
        if p is None:
            continue
        try:
            free.append(shutil.disk_usage(p).free)
        except OSError:
            continue
    return min(free) if free else 0


def disk_full(e: BaseException, where: Path) -> Failure | None:
    """The judge's own write failed for want of space: the machine's fault (checked, not believed)."""
    import errno

    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT) and min_free_space([where]) < DISK_FREE_MIN:
        return Failure(
            Category.DISK_FULL,
            f"the judge could not write {getattr(e, 'filename', None) or where}: no space left on the disk (not the code's fault)",
        )
    return None


_ALLOC = re.compile(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB)")
_PROCESS_HOLDS = re.compile(r"this process has ([\d.]+) (GiB|MiB|KiB) memory in use")
_UNITS = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}
OWN_DEMAND_X = (
    16  # a candidate may hold this many times one trial's tensors (workspace, im2col) before an OOM is its own
)


def is_oom(err: dict) -> bool:
    """A worker's error report is an out-of-memory error."""
    return "OutOfMemoryError" in (err.get("mro") or []) or "out of memory" in (err.get("message") or "").lower()


class GpuOom:
    """Whose memory a CUDA out-of-memory error ran into: what the process asked for and held, what
    was free, of how much. ``held`` counts all the process's device memory where torch's message gives
    it (memory taken outside torch's allocator included), else what torch's allocator had reserved."""

    def __init__(self, err: dict):
        text = err.get("message") or ""
        mem = err.get("memory") or {}
        m, h = _ALLOC.search(text), _PROCESS_HOLDS.search(text)
        self.asked = float(m[1]) * _UNITS[m[2]] if m else 0.0
        self.held = float(h[1]) * _UNITS[h[2]] if h else float(mem.get("reserved", 0))
        self.total, self.free = mem.get("total"), mem.get("free")

    @classmethod
    def of(cls, err: dict) -> "GpuOom | None":
        return cls(err) if is_oom(err) and err.get("memory") else None

    @property
    def would_fit_alone(self) -> bool:
        """Its request on top of what it held fits well inside the GPU: others held the rest."""
        return bool(self.total) and self.asked + self.held <= 0.9 * self.total

    def beyond_need(self, trial_bytes: int | None) -> bool:
        """What it held and asked is its own excess, whoever held the rest: more than half the GPU,
        and more than OWN_DEMAND_X times what one trial's tensors are. Other judges' CUDA contexts
        always hold some of the GPU; a kernel that fills the rest is not a machine fault."""
        need = self.asked + self.held
        return bool(self.total) and trial_bytes is not None and need > max(0.5 * self.total, OWN_DEMAND_X * trial_bytes)

    def own_text(self, trial_bytes: int) -> str:
        gib = 2**30
        return (
            f"the GPU ran out of memory: the candidate held {self.held / gib:.1f} GiB and asked {self.asked / gib:.1f} more, "
            f"over half of the GPU's {(self.total or 0) / gib:.1f} GiB and {(self.held + self.asked) / max(trial_bytes, 1):.0f}x "
            f"one trial's inputs and outputs ({size_text(trial_bytes)})"
        )

    def others_text(self, who: str) -> str:
        gib = 2**30
        return (
            f"the GPU ran out of memory held by other processes: {who} asked {self.asked / gib:.1f} GiB, "
            f"{(self.free or 0) / gib:.1f} of {(self.total or 0) / gib:.1f} GiB were free and it held {self.held / gib:.1f}"
        )


def machine_fault(outcome: ChildOutcome, disk: Path | None = None, trial_bytes: int | None = None) -> Failure | None:
    """A failure that is the machine's, not the code's: a full disk, the kernel's OOM killer
    (the child under its own limit), a GPU that is gone. Checked against the machine itself,
    so a candidate that prints "No space left on device" is not believed."""
    err = outcome.last("error") or {}
    text = f"{err.get('message') or ''}\n{outcome.stderr_tail[-4000:]}"
    if _NO_SPACE.search(text):
        free = min_free_space([disk, Path(outcome.argv[-1]).parent if outcome.argv else None])
        if free < DISK_FREE_MIN:
            return Failure(
                Category.DISK_FULL,
                f"a write failed for lack of disk space ({free >> 20} MiB free where the judge works): the machine's fault, not the code's",
            )
    if outcome.signal == "SIGKILL" and not outcome.killed_by_us and outcome.oom_kills_during:
        return Failure(
            Category.HOST_MEMORY,
            f"the kernel's OOM killer ended the process (peak {outcome.peak_rss_bytes / 2**30:.1f} GiB, under its own limit): "
            "the machine ran out of memory",
        )
    oom = GpuOom.of(err)
    if oom is not None and oom.would_fit_alone:  # not the code's: it asked for what an idle GPU has
        if oom.beyond_need(trial_bytes):  # ... unless what it asked is far beyond what its task needs
            return Failure(Category.OOM, oom.own_text(trial_bytes or 0))
        return Failure(Category.GPU_BUSY, f"{oom.others_text('the candidate')} (not the code's fault)")
    if _GPU_GONE.search(text):
        return Failure(Category.GPU_LOST, f"the GPU is unavailable: {_first_line(_GPU_GONE.search(text).group(0))}")  # type: ignore[union-attr]
    return None


def _phase(outcome: ChildOutcome) -> str | None:
    p = outcome.last("phase")
    return p.get("phase") if p else None


def _last_cuda_line(text: str) -> str:
    lines = [line for line in text.splitlines() if re.search(r"CUDA|cuda|Triton", line)]
    return lines[-1].strip()[:300] if lines else _first_line(text)


def _from_error(stage: str, err: dict, build_dir: Path | None) -> Failure:
    kind, phase = err.get("kind"), err.get("phase")
    text = err.get("message") or ""
    exc = err.get("exc_type", "Exception")
    mro = err.get("mro") or []
    tb = err.get("traceback") or ""
    if kind == "gpu_required":
        return Failure(Category.NO_GPU, text)
    if kind == "no_model_new":
        return Failure(Category.NO_MODEL_NEW, text)
    if kind == "exit":
        return Failure(
            Category.EXIT, f"the candidate raised SystemExit({text}) during {phase}: it must return, not exit"
        )
    if "Error building extension" in text:
        cat = _build_category(text)
        errors = build_errors(text, build_dir)
        n = sum(1 for e in errors if not e.startswith("    "))
        tool = {Category.NVCC: "nvcc", Category.HOST_CXX: "the host C++ compiler", Category.LINK: "the linker"}.get(
            cat, "the build"
        )
        return Failure(cat, f"{tool} reported {n} error{'s' if n != 1 else ''}" if n else "the build failed", errors)
    if "CompilationError" in mro or exc in (
        "CompilationError",
        "CompileTimeAssertionFailure",
        "UnsupportedLanguageConstruct",
    ):
        return Failure(
            Category.TRITON_COMPILE, f"Triton failed to compile a kernel: {_first_line(text, 600)}", _tail(tb, 6)
        )
    if exc == "ImportError" and "undefined symbol" in text:
        return Failure(Category.LINK, f"the extension does not load: {_first_line(text)}")
    cuda = cuda_category(f"{exc}: {text}")
    if cuda is not None:
        return Failure(cuda[0], f"{cuda[1]} during {phase}: {_first_line(text)}", _tail(tb, 6))
    if phase == "import_candidate":
        return Failure(Category.IMPORT, f"importing the candidate raised {exc}: {_first_line(text)}", _tail(tb, 6))
    where = {"build_model": "ModelNew(*get_init_inputs())", "forward": "forward"}.get(phase or "", phase or stage)
    return Failure(Category.EXCEPTION, f"{exc} in {where}: {_first_line(text)}", _tail(tb, 8))


def _tail(tb: str, n: int) -> list[str]:
    """The traceback's frames in the candidate's own file, and the error: not the judge's or importlib's."""
    lines = [line for line in tb.rstrip().splitlines() if line.strip()]
    keep: list[str] = []
    in_candidate = False
    for line in lines:
        if line.lstrip().startswith("File "):
            in_candidate = "candidate.py" in line
            if in_candidate:
                keep.append(
                    line.strip().replace(line.strip().split('"')[1], "candidate.py") if '"' in line else line.strip()
                )
        elif in_candidate:
            keep.append(line.rstrip())
    if lines and (not keep or keep[-1].strip() != lines[-1].strip()):
        keep.append(lines[-1].strip())
    return [k for k in keep if k][-n:]
