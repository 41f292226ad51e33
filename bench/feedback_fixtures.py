"""Trim bench/feedback_capture.sh's captures into the test fixtures in tests/fixtures/ncu/feedback/.

    python3 bench/feedback_fixtures.py CAPTURE_DIR [OUT_DIR]

Per case: the details page, with the counters the judge asks for by name (ncu.EXTRA_METRICS)
appended from the raw page as ncu prints them in a judged run (section "Command line profiler
metrics"), and the source page with only its source-line rows (the SASS rows under each line, which
the findings do not read, dropped). The report itself is left out.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


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
        kept = [line for line in (src / f"{case}.source.csv").read_text().splitlines() if not line.startswith('"",')]
        (out / f"{case}.source.csv").write_text("\n".join(kept) + "\n")
        print(case, (out / f"{case}.details.csv").stat().st_size, (out / f"{case}.source.csv").stat().st_size)


if __name__ == "__main__":
    main()
