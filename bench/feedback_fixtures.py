"""Trim bench/feedback_capture.sh's captures into the test fixtures in tests/fixtures/ncu/feedback/.

    python3 bench/feedback_fixtures.py CAPTURE_DIR [OUT_DIR]

Per case: the details page, with the counters the judge asks for by name (ncu.EXTRA_METRICS)
appended from the raw page as ncu prints them in a judged run (section "Command line profiler
metrics"), and the source page with its source-line rows and the SASS rows under each line (the
opcodes the findings read: HMMA against HGMMA, RED/ATOM, FP64, integer division), each cut to the
columns the findings read (``SOURCE_COLUMNS``). The report itself is left out.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


# The source page's columns the findings read (tools/profile/findings.py), after "Line No", "Source",
# "Address", "Source" (the CUDA line and the SASS instruction).
SOURCE_COLUMNS = (
    "Warp Stall Sampling (All Samples)",
    "Instructions Executed",
    "Thread Instructions Executed",
    "Divergent Branches",
    "Address Space",
    "Access Operation",
    "Access Size",
    "L1 Conflicts Shared N-Way",
    "L1 Wavefronts Shared",
    "L1 Wavefronts Shared Excessive",
    "L1 Wavefronts Shared Ideal",
    "L2 Theoretical Sectors Global",
    "L2 Theoretical Sectors Global Excessive",
    "L2 Theoretical Sectors Global Ideal",
)


def source_page(text: str) -> str:
    """The source page cut to ``SOURCE_COLUMNS``, every row kept (source lines and their SASS)."""
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    keep: list[int] | None = None
    header_of: dict[int, str] = {}
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "Line No":
            keep = [0, 1, 2, 3] + [i for i, h in enumerate(row) if i > 3 and h in SOURCE_COLUMNS]
        if row[0] in ("File Path", "Function Name") or keep is None:
            w.writerow(row)
        elif row[0] == "Line No" or row[0].strip():  # the header, a source line
            w.writerow([row[i] if i < len(row) else "" for i in keep])
        else:  # a SASS row: its instruction and how often it ran are all the findings read of it
            cells = [
                (row[i] if i < len(row) else "") if i in (0, 1, 3) or header_of[i] == "Instructions Executed" else ""
                for i in keep
            ]
            cells[3] = cells[3].strip()
            w.writerow(cells)
        if row[0] == "Line No":
            header_of = dict(enumerate(row))
    return out.getvalue()


def main() -> None:
    from kernelfix.tools.profile import ncu

    src = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "tests" / "fixtures" / "ncu" / "feedback"
    out.mkdir(parents=True, exist_ok=True)
    wanted = [re.compile(e.removeprefix("regex:")) for e in ncu.EXTRA_METRICS]
    for details in sorted(src.glob("*.details.csv")):
        case = details.name.removesuffix(".details.csv")
        raw = list(csv.reader(io.StringIO((src / f"{case}.raw.csv").read_text())))
        text = details.read_text()
        rows = list(csv.reader(io.StringIO(text)))
        head = rows[0]
        by_id: dict[str, list[str]] = {}
        for r in rows[1:]:
            if r and r[0].isdigit() and r[0] not in by_id:
                by_id[r[0]] = r
        extra = io.StringIO()
        w = csv.writer(extra, quoting=csv.QUOTE_ALL, lineterminator="\n")
        sec, name, unit, value = (head.index(c) for c in ("Section Name", "Metric Name", "Metric Unit", "Metric Value"))
        for values in raw[2:]:
            kid = values[0]
            base = by_id.get(kid)
            if base is None:
                continue
            for h, u, v in zip(raw[0], raw[1], values):
                if any(p.fullmatch(h) for p in wanted):
                    row = list(base)
                    row[sec], row[name], row[unit], row[value] = "Command line profiler metrics", h, u, v
                    for i in range(value + 1, len(row)):
                        row[i] = ""
                    w.writerow(row)
        (out / f"{case}.details.csv").write_text(text.rstrip("\n") + "\n" + extra.getvalue())
        (out / f"{case}.source.csv").write_text(source_page((src / f"{case}.source.csv").read_text()))
        print(case, (out / f"{case}.details.csv").stat().st_size, (out / f"{case}.source.csv").stat().st_size)


if __name__ == "__main__":
    main()
