for t in 88_MinGPTNewGelu:gelu_triton 19_ReLU:relu_triton; do
  rm -rf /tmp/wd; python3 -P -m kernelfix eval tests/kernelbench/level1/${t%%:*}.py bench/candidates/${t##*:}.py --json --workdir /tmp/wd > /tmp/v.json
  python3 -c "import json; v=json.load(open('/tmp/v.json')); print(v['category'], (v['message'] or '')[:200], v['breakdown'])"
  grep -h '"type": "output"\|"type": "ops"\|"phase": "forward"' /tmp/wd/evals/*/logs/candidate.log | python3 -c "
import sys, json
for line in sys.stdin:
    m = json.loads(line)
    if m['type'] == 'output': print('output', m['index'], 'open', round(m['open_ms']), 'fwd', round(m['forward_ms']), 'handoff', round(m['handoff_ms']), 'alloc GiB', round((m['allocated'] or 0)/2**30, 2), 't', round(m['_t'], 2))
    elif m['type'] == 'phase': print('  forward start t', round(m['_t'], 2))
    else: print('ops t', round(m['_t'], 2))
"
done
