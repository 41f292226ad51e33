# One task twice through `kernelfix eval`, keeping the logs: every message of the candidate's worker
# with its arrival time, and the verdict's breakdown. A diagnostic for the judge's own overheads.
for t in ${DIAG_TASKS:-88_MinGPTNewGelu:gelu_triton 88_MinGPTNewGelu:gelu_triton 19_ReLU:relu_triton}; do
  rm -rf /tmp/wd; python3 -P -m kernelfix eval tests/kernelbench/level1/${t%%:*}.py bench/candidates/${t##*:}.py --json --workdir /tmp/wd > /tmp/v.json
  python3 -c "import json; v=json.load(open('/tmp/v.json')); print('##', '${t}', v['category'], (v['message'] or '')[:200], v['stage_seconds'], v['breakdown'])"
  python3 - /tmp/wd/evals/*/logs/candidate.log <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    keep = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in m.items() if k in ("type", "phase", "index", "open_ms", "forward_ms", "handoff_ms", "allocated", "_t", "done", "trial")}
    print(keep)
PY
done
