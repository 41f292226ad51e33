"""The files of one capture, named after the task: TASK.py, TASK.weights.pt, TASK.capture.json, TASK.call.pt."""

from __future__ import annotations

import importlib.util
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kernelfix.capture.schema import CaptureManifest


@dataclass(frozen=True)
class CaptureFiles:
    task: Path

    @property
    def weights(self) -> Path:
        return self.task.with_name(self.task.stem + ".weights.pt")

    @property
    def manifest(self) -> Path:
        return self.task.with_name(self.task.stem + ".capture.json")

    @property
    def call(self) -> Path:
        """The captured inputs and output: the user's data, for load_best's check only; never in the task."""
        return self.task.with_name(self.task.stem + ".call.pt")

    def all(self) -> list[Path]:
        return [self.task, self.weights, self.manifest, self.call]

    def read_manifest(self) -> CaptureManifest:
        return CaptureManifest.model_validate_json(self.manifest.read_text(encoding="utf-8"))


def import_file(path: Path, prefix: str) -> ModuleType:
    """Import a Python file under a fresh module name (registered: Triton's @jit looks its module up by name)."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod
