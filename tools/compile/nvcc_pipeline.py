"""[candidate worker, one-shot child] Run one ``nvcc -c`` as nvcc itself would, but with its two front ends in parallel.

nvcc compiles a ``.cu`` in one sequence: host preprocessing, ``cudafe++`` (the
host front end), then per GPU arch device preprocessing, ``cicc`` (the device
front end), ``ptxas``, then ``fatbinary``, then the host compiler on what
``cudafe++`` produced. For a candidate that includes the torch headers,
``cudafe++`` and ``cicc`` each spend 20 s or more parsing them, one after the
other. The only thing ``cicc`` takes from ``cudafe++`` is the module id file,
and ``cicc`` can compute the same id itself; so here both chains run at once,
the ids are compared, and the final host compile runs as before. The commands
are exactly the ones ``nvcc --dryrun`` prints; if the ids ever differ the
device chain is rerun with ``cudafe++``'s id, and any command sequence this
module does not recognize is handed back to plain nvcc. The object file is
byte-identical to nvcc's (tests/test_build.py checks it).

Errors read as nvcc's would: the outputs of the steps nvcc would have run, in
its order, up to the first one that failed.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


class StepTime(BaseModel):
    tool: str
    seconds: float


class NvccResult(BaseModel):
    ok: bool
    output: str
    mode: str  # "split": front ends in parallel; "nvcc": plain nvcc (unrecognized plan, or asked for)
    seconds: float
    steps: list[StepTime] = Field(default_factory=list)
    note: str | None = None


@dataclass
class _Step:
    kind: str  # pre_host, cudafe, pre_dev, cicc, ptxas, fatbinary, host_cc, rm
    command: str
    seconds: float = 0.0
    output: str = ""
    returncode: int | None = None


@dataclass
class _Plan:
    env: dict[str, str]
    host: list[_Step]  # preprocess + cudafe++
    device: list[_Step]  # per arch: preprocess, cicc, ptxas...; then fatbinary
    final: list[_Step]  # host compile, rm
    module_id: str | None = None  # cudafe++'s module id file
    extra_output: str = ""  # what nvcc's driver itself printed


def _strip_depfile(argv: list[str]) -> list[str]:
    """Drop ``-MD -MF file``: nvcc's dry run shows dependency filtering as an internal step it cannot replay.
    The depfile only tells ninja which headers to watch; it does not change the object."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "-MF":
            skip = True
            continue
        if a in ("-MD", "-MMD") or a.startswith("-MF"):
            continue
        out.append(a)
    return out


def _tool(command: str, env: dict[str, str]) -> str:
    first = shlex.split(command)[0]
    return os.path.basename(first.replace("$CICC_PATH", env.get("CICC_PATH", "")))


def _classify(command: str, env: dict[str, str]) -> str | None:
    tool = _tool(command, env)
    argv = shlex.split(command)
    if tool == "cudafe++":
        return "cudafe"
    if tool == "cicc":
        return "cicc"
    if tool == "ptxas":
        return "ptxas"
    if tool == "fatbinary":
        return "fatbinary"
    if tool == "rm":
        return "rm"
    if "-E" in argv:
        return "pre_dev" if any(a.startswith("-D__CUDA_ARCH__=") for a in argv) else "pre_host"
    if "-c" in argv:
        return "host_cc"
    return None


def plan(argv: list[str], cwd: Path, env: dict[str, str], tmpdir: Path) -> _Plan | str:
    """nvcc's own commands for ``argv`` (an ``nvcc ... -c x.cu -o x.o`` command), or why they can't be split."""
    dry_env = {**env, "TMPDIR": str(tmpdir)}
    r = subprocess.run([*argv, "--dryrun"], cwd=cwd, env=dry_env, capture_output=True, text=True)
    if r.returncode != 0:
        return f"nvcc --dryrun failed ({r.returncode})"
    step_env = dict(dry_env)
    driver_output = []
    steps: list[_Step] = []
    for line in (r.stdout + r.stderr).splitlines():
        if not line.startswith("#$ "):
            if line.strip():
                driver_output.append(line)
            continue
        cmd = line[3:].strip()
        m = _ASSIGN.match(cmd)
        if m and " " not in m.group(1):
            name, value = m.group(1), m.group(2)
            try:
                step_env[name] = " ".join(shlex.split(value)) if value.strip() else value
            except ValueError:
                return f"unparsable nvcc variable {name}"
            continue
        try:
            kind = _classify(cmd, step_env)
        except ValueError:
            kind = None
        if kind is None:
            return f"unrecognized nvcc step: {cmd[:80]}"
        steps.append(_Step(kind, cmd))
    kinds = [s.kind for s in steps]
    # The shape split mode knows: pre_host cudafe (pre_dev cicc ptxas*)+ fatbinary rm* host_cc rm*
    shape = " ".join(kinds)
    if not re.fullmatch(r"pre_host cudafe( pre_dev cicc( ptxas)*)+ fatbinary( rm)* host_cc( rm)*", shape):
        return f"unrecognized nvcc plan: {shape}"
    cut = kinds.index("cudafe") + 1
    fat = kinds.index("fatbinary")
    host, device = steps[:cut], steps[cut : fat + 1]
    # nvcc's "rm" lines only clean its temp files; the temp directory goes as a whole here.
    final = [s for s in steps[fat + 1 :] if s.kind != "rm"]
    module_id = _option(host[-1].command, "--module_id_file_name")
    if module_id is None or "--gen_module_id_file" not in host[-1].command:
        return "cudafe++ does not write a module id"
    for s in device:
        if s.kind == "cicc" and _option(s.command, "--module_id_file_name") != module_id:
            return "cicc does not read cudafe++'s module id"
    return _Plan(
        env=step_env, host=host, device=device, final=final, module_id=module_id, extra_output="\n".join(driver_output)
    )


def _option(command: str, name: str) -> str | None:
    argv = shlex.split(command)
    for i, a in enumerate(argv[:-1]):
        if a == name:
            return argv[i + 1]
    return None


def _own_module_id(command: str, module_id: str, index: int) -> tuple[str, str]:
    """The cicc command with cicc computing the module id itself, into a file of its own."""
    own = f"{module_id}.device{index}"
    pattern = re.compile(r'--module_id_file_name\s+("[^"]*"|\S+)')
    return pattern.sub(lambda _: f'--gen_module_id_file --module_id_file_name "{own}"', command, count=1), own


class _Runner:
    """Runs a chain of steps in order, killable from another thread."""

    def __init__(self, steps: list[_Step], cwd: Path, env: dict[str, str]):
        self.steps, self.cwd, self.env = steps, cwd, env
        self.proc: subprocess.Popen | None = None
        self.cancelled = False
        self._lock = threading.Lock()  # a cancel never misses a step that is just starting
        self.failed: _Step | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "_Runner":
        self.thread.start()
        return self

    def _run(self) -> None:
        for s in self.steps:
            t0 = time.monotonic()
            with self._lock:
                if self.cancelled:
                    return
                self.proc = subprocess.Popen(
                    ["/bin/sh", "-c", s.command],
                    cwd=self.cwd,
                    env=self.env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            out, _ = self.proc.communicate()
            s.seconds = time.monotonic() - t0
            s.output = out.decode("utf-8", "replace")
            s.returncode = self.proc.returncode
            if s.returncode != 0:
                self.failed = s
                return

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            p = self.proc
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def join(self) -> None:
        self.thread.join()


def _output(plan: _Plan, upto: list[_Step]) -> str:
    parts = [plan.extra_output] if plan.extra_output else []
    parts += [s.output for s in upto if s.output]
    return "".join(p if p.endswith("\n") else p + "\n" for p in parts)


def run_plain(argv: list[str], cwd: Path, env: dict[str, str], note: str | None = None) -> NvccResult:
    t0 = time.monotonic()
    r = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return NvccResult(
        ok=r.returncode == 0,
        output=r.stdout.decode("utf-8", "replace"),
        mode="nvcc",
        seconds=time.monotonic() - t0,
        note=note,
    )


def compile_split(argv: list[str], cwd: Path, env: dict[str, str]) -> NvccResult:
    """Compile like ``argv`` (``nvcc ... -c in.cu -o out.o``) with the host and device front ends in parallel."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kf-nvcc-") as tmp:
        p = plan(_strip_depfile(argv), cwd, env, Path(tmp))
        if isinstance(p, str):
            return run_plain(argv, cwd, env, note=f"not split: {p}")
        assert p.module_id is not None
        device = [_Step(s.kind, s.command) for s in p.device]
        own_ids = []
        for i, s in enumerate(device):
            if s.kind == "cicc":
                s.command, own = _own_module_id(s.command, p.module_id, i)
                own_ids.append(own)
        host_run = _Runner(p.host, cwd, p.env).start()
        dev_run = _Runner(device, cwd, p.env).start()
        host_run.join()
        if host_run.failed is not None:
            dev_run.cancel()
            dev_run.join()
            return _result(p, False, p.host[: p.host.index(host_run.failed) + 1], t0)
        dev_run.join()
        note = None
        ran_device = device
        ids_match = dev_run.failed is None and all(_read(i) == _read(p.module_id) for i in own_ids)
        if not ids_match:
            # Either cicc failed (rerun as nvcc would, to get its exact messages) or the ids differ.
            note = "device chain rerun with cudafe++'s module id" if dev_run.failed is None else None
            again = _Runner([_Step(s.kind, s.command) for s in p.device], cwd, p.env).start()
            again.join()
            ran_device = again.steps
            if again.failed is not None:
                upto = p.host + ran_device[: ran_device.index(again.failed) + 1]
                return _result(p, False, upto, t0, note)
        fin = _Runner(p.final, cwd, p.env).start()
        fin.join()
        done = p.host + ran_device + (p.final if fin.failed is None else p.final[: p.final.index(fin.failed) + 1])
        return _result(p, fin.failed is None, done, t0, note)


def _result(p: _Plan, ok: bool, steps: list[_Step], t0: float, note: str | None = None) -> NvccResult:
    return NvccResult(
        ok=ok,
        output=_output(p, steps),
        mode="split",
        seconds=time.monotonic() - t0,
        steps=[StepTime(tool=s.kind, seconds=round(s.seconds, 3)) for s in steps],
        note=note,
    )


def _read(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None
