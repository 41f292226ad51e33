#!/usr/bin/env bash
# The example batch on the GPU (bench/device_run.sh batch): examples/batch/manifest.jsonl (four sessions,
# replay models) with four workers, then the same command again (every session skipped), then an export.
# Sessions stay in /tmp/kfbatch (their judge work dirs hold hundreds of MB of inputs); the report, the
# export's analysis and the GPU lease log go to REPORT_DIR, and a digest to LOG_DIR/batch.log.
set -o pipefail
log_dir=${1:?LOG_DIR}; report=${2:?REPORT_DIR}
mkdir -p "$report"
locks="${KERNELFIX_CACHE:-$HOME/.cache/kernelfix}/locks"
rm -rf /tmp/kfbatch; rm -f "$locks"/gpu-*.log  # a fresh batch, and a lease log of this run only
run() { echo "\$ $*"; "$@"; echo "exit code $?"; }
{
  run python3 -P -m kernelfix batch examples/batch/manifest.jsonl --out /tmp/kfbatch --workers 4
  run python3 -P -m kernelfix batch examples/batch/manifest.jsonl --out /tmp/kfbatch --workers 4
  run python3 -P -m kernelfix export /tmp/kfbatch --out "$report/sft.jsonl" --min-speedup-gain 0 --per-task 0
  cp -r /tmp/kfbatch/summary.md /tmp/kfbatch/summary.json /tmp/kfbatch/plots "$report/"
  cp "$locks"/gpu-*.log "$report/" 2>/dev/null
  python3 - "$report" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/gpu-*.log")):
    holds = [json.loads(l) for l in open(f)]
    overlaps = sum(b["got"] < a["released"] for a, b in zip(holds, holds[1:]))
    print(f"{f.rsplit('/', 1)[-1]}: {len(holds)} GPU stages from {len({h['pid'] for h in holds})} judges, {overlaps} overlapping, "
          f"waited {sum(h['got'] - h['asked'] for h in holds):.1f} s, held {sum(h['released'] - h['got'] for h in holds):.1f} s")
PY
  echo "=== summary.md"; cat /tmp/kfbatch/summary.md
  echo "=== ANALYSIS.md"; cat "$report/ANALYSIS.md"
} 2>&1 | tee "$log_dir/batch.log"
