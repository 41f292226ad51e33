"""[judge, one-shot child] What the sanitizer stage hands to tool runs that started before it had it.

The sanitizer stage starts its tool runs (a new Python under compute-sanitizer each: torch's import and
CUDA's start under the tool are most of a run) as it begins, before it has room on the GPU for its
memory. Each imports torch, the task and the candidate (CPU work), then waits for the room (``ROOM_FILE``)
before it starts CUDA and builds the model, then waits, ready, for the plan the probe chose
(``PLAN_FILE``). The judge writes both in the evaluation's own directory, where the candidate cannot
write (``sandboxing.CANDIDATE_DIRS``): the room once the stage has it, the plan once it holds the GPU's
lock for the tools; ``{"cancel": true}`` when there is nothing to run them on. A tool that is ready
says so on its message channel (its ``phase``) and in a file of its output directory: the file only
lets the judge stop waiting earlier.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

ROOM_FILE = "sanitize_room.json"  # in the evaluation's directory (read-only to the candidate)
PLAN_FILE = "sanitize_plan.json"
IMPORTED_PHASE = "imported"  # a tool run's phase while it waits for the room
READY_PHASE = "ready"  # ... and while it waits for the plan
POLL_S = 0.02


def ready_file(outdir: Path, stage: str) -> Path:
    return outdir / f"{stage}.ready"


def publish(path: Path, payload: dict[str, Any]) -> None:
    """Write the plan whole (a reader never sees half of it): a new name, then a rename over ``path``."""
    from kernelfix.base import atomic

    atomic.write_text(path, json.dumps(payload, default=str), fsync=False)


def wait(path: Path, timeout_s: float, poll_s: float = POLL_S) -> dict[str, Any] | None:
    """The plan once ``path`` holds it (None after ``timeout_s`` without one, or when it cannot be read)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            data = json.loads(path.read_text())
            return data if isinstance(data, dict) else None
        except FileNotFoundError:
            pass
        except (OSError, ValueError):
            return None
        if time.monotonic() >= end:
            return None
        time.sleep(poll_s)
