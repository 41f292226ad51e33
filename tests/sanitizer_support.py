"""The sanitizer's defect kernels (tests/sanitizer/candidates), each with what its header says:
``# task:`` (a file of tests/sanitizer/tasks or tests/feedback/tasks), ``# defect:`` (the hazard kind
the sanitizer must name; ``global_race``: a race on global memory no tool sees, which the stage reads from the source), ``# expect:`` (the verdict's category, which the sanitizer never changes),
``# line:`` (the hazard's line in the candidate, alternatives split by `` | ``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent / "sanitizer"
CANDIDATES = HERE / "candidates"
TASK_DIRS = (HERE / "tasks", HERE.parent / "feedback" / "tasks")
_HEADER = re.compile(r"^# (task|defect|expect|line): (.*)$", re.M)


@dataclass
class SanitizerCase:
    name: str
    path: Path
    task: Path
    defect: str
    expect: str | None
    lines: list[str] = field(default_factory=list)

    def line_numbers(self) -> list[int]:
        """The expected lines' numbers in the candidate's own source."""
        text = [t.strip() for t in self.path.read_text().splitlines()]
        return [i + 1 for i, t in enumerate(text) if t in self.lines and not t.startswith("#")]


def task_path(name: str) -> Path:
    return next(d / f"{name}.py" for d in TASK_DIRS if (d / f"{name}.py").exists())


def load(path: Path) -> SanitizerCase:
    head = dict(_HEADER.findall("\n".join(path.read_text().splitlines()[:6])))
    return SanitizerCase(
        name=path.stem,
        path=path,
        task=task_path(head["task"].strip()),
        defect=head["defect"].strip(),
        expect=head.get("expect"),
        lines=[x.strip() for x in head.get("line", "").split(" | ") if x.strip()],
    )


def cases() -> list[SanitizerCase]:
    return [load(p) for p in sorted(CANDIDATES.glob("*.py"))]


def honest() -> SanitizerCase:
    """The control: an honest shared-memory tree reduction (issue 22's fairness case)."""
    path = HERE.parent / "feedback" / "candidates" / "row_sum_tree_cuda.py"
    return SanitizerCase(name=path.stem, path=path, task=task_path("row_sum"), defect="none", expect="ok")
