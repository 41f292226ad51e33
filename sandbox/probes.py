"""What this machine's sandbox gives, found by running children: every layer (``probe``), and the layers
CUDA works under (``for_gpu``, checked once per process and settings, and once per boot with a record dir)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

from kernelfix.sandbox.isolation import LAYERS, Isolation, SandboxReport
from kernelfix.sandbox.process import Limits, run_child


@functools.lru_cache(maxsize=1)
def probe() -> SandboxReport:
    """Run a trivial child with every layer asked for, once per process: which layers this machine gives."""
    with tempfile.TemporaryDirectory(prefix="kernelfix-probe-") as d:
        out = run_child(
            [sys.executable, "-c", "pass"],
            cwd=d,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            limits=Limits(wall_s=60, memory_bytes=1 << 30, max_processes=64),
            isolation=Isolation(writable=[d]),
        )
    return SandboxReport(layers=out.isolation, notes=out.sandbox_notes)


_CUDA_CHECK = "import torch; torch.ones(1, device='cuda').add_(1); torch.cuda.synchronize(); print('cuda ok')"


def _cuda_runs(iso: Isolation, python: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="kernelfix-gpu-probe-") as d:
        env = {
            k: v
            for k, v in os.environ.items()
            if k in ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "HOME")
        }
        out = run_child(
            [python, "-c", _CUDA_CHECK],
            cwd=d,
            env=env,
            limits=Limits(wall_s=120),
            isolation=iso.model_copy(update={"writable": [d, *iso.writable]}),
        )
    return ("cuda ok" in out.stdout_tail), (out.stderr_tail.strip().splitlines() or [f"exit {out.returncode}"])[-1][
        :200
    ]


_gpu_lock = threading.Lock()
_gpu_known: dict[tuple[str, str, str | None], tuple[str, str | None]] = {}  # this process's answers


def _machine_id() -> str | None:
    """This boot of this machine and its GPU driver: what a sandbox's effect on CUDA depends on.
    None where either cannot be read (then nothing is kept on disk)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        driver = Path("/proc/driver/nvidia/version").read_text().strip()
    except OSError:
        return None
    return hashlib.sha256(f"{boot}\n{driver}".encode()).hexdigest()[:16]


def _gpu_layers(settings_json: str, python: str, record_dir: str | None = None) -> tuple[str, str | None]:
    """``_search_gpu_layers``, once per process, and once per boot where ``record_dir`` is given:
    the check starts torch and CUDA in a child (3-6 s on the H100's host, measured: most of a cold
    ``kernelfix eval``'s compile stage beside the fork server's imports), and its answer cannot
    change until the machine or its driver does."""
    with _gpu_lock:  # the reference's and the candidate's first workers ask at once: one check
        known = _gpu_known.get((settings_json, python, record_dir))
        if known is not None:
            return known
        machine = _machine_id() if record_dir else None
        key = hashlib.sha256(f"{machine}\n{python}\n{settings_json}".encode()).hexdigest()[:24]
        path = Path(record_dir) / f"gpu-layers-{key}.json" if record_dir and machine else None
        chosen = note = None
        if path is not None:
            try:
                rec = json.loads(path.read_text())
                chosen, note = rec["settings"], rec["note"]
            except (OSError, ValueError, KeyError, TypeError):
                pass
        if chosen is None:
            chosen, note = _search_gpu_layers(settings_json, python)
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps({"settings": chosen, "note": note}))
                    os.replace(tmp, path)
                except OSError:  # a read-only cache costs the next process the check, nothing more
                    pass
        _gpu_known[(settings_json, python, record_dir)] = (chosen, note)
        return chosen, note


def _search_gpu_layers(settings_json: str, python: str) -> tuple[str, str | None]:
    """The settings CUDA works under: all asked for if it can; else each layer that works on its own, together."""
    base = Isolation.model_validate_json(settings_json)
    ok, why = _cuda_runs(base, python)
    if ok:
        return settings_json, None
    asked = [layer for layer in LAYERS if getattr(base, layer)]
    # One layer at a time, so two layers that each break CUDA (seen on a Firecracker H100:
    # the PID namespace's and the mount namespace's read-only /proc) don't hide the others that work.
    alone = {layer: _cuda_runs(base.model_copy(update={k: k == layer for k in LAYERS}), python)[0] for layer in asked}
    kept = [layer for layer in asked if alone[layer]]
    dropped = [layer for layer in asked if not alone[layer]]
    if kept:
        trial = base.model_copy(update={k: k in kept for k in LAYERS})
        if _cuda_runs(trial, python)[0]:
            return (
                trial.model_dump_json(),
                f"CUDA fails inside the full sandbox here ({why}); running without its {', '.join(dropped)} layer(s)",
            )
    return base.model_copy(
        update=dict.fromkeys(LAYERS, False)
    ).model_dump_json(), f"CUDA fails inside the sandbox here ({why}); running without isolation"


def for_gpu(
    iso: Isolation, python: str | None = None, *, record_dir: str | Path | None = None
) -> tuple[Isolation, str | None]:
    """``iso`` minus the layers that keep CUDA from working on this machine, and a note saying which.

    Checked once per process and settings (a child that initialises CUDA), and with ``record_dir``
    once per boot of the machine: a sandbox that breaks the GPU would turn every candidate into a
    runtime error.
    """
    key = iso.model_copy(update={"writable": [], "hidden": []}).model_dump_json()
    chosen, note = _gpu_layers(key, python or sys.executable, str(record_dir) if record_dir else None)
    layers = Isolation.model_validate_json(chosen)
    return iso.model_copy(update=layers.model_dump(exclude={"writable", "hidden"})), note
