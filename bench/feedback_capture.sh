#!/usr/bin/env bash
# Nsight Compute's raw pages for every case in tests/feedback (issue 22's defects): the full section
# set with source counters, as details, raw and source-page CSV, plus the report itself.
# usage: bench/feedback_capture.sh OUTDIR [CASE...]   (CASE: a candidate's file stem)
out=${1:?outdir}; shift; mkdir -p "$out"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
cases=("$@"); [ ${#cases[@]} -eq 0 ] && cases=($(ls tests/feedback/candidates/ | sed 's/\.py$//'))
task_of() {
  local t; t=$(sed -n 's/^# task: //p' "tests/feedback/candidates/$1.py")
  case $t in kernelbench/*) echo "tests/$t.py" ;; *) echo "tests/feedback/tasks/$t.py" ;; esac
}
for c in "${cases[@]}"; do  # every build at once first (16 cores), so each profiled run loads its extension from the cache
  python3 -P bench/feedback_drive.py "$(task_of "$c")" "tests/feedback/candidates/$c.py" --build-only > "$out/$c.build.log" 2>&1 &
done
wait
echo "built: $(date +%T)"
# the counters the judge asks for by name, as the judged run does (tools/profile/ncu.py EXTRA_METRICS)
metrics=$(python3 -P -c 'from kernelfix.tools.profile import ncu; print(",".join(ncu.EXTRA_METRICS))')
for c in "${cases[@]}"; do
  cand=tests/feedback/candidates/$c.py
  task=$(task_of "$c")
  t0=$(date +%s)
  timeout 150 "$ncu" --set full --metrics "$metrics" --import-source yes --nvtx --nvtx-include "kernelfix_candidate/" --target-processes all \
      --launch-count 3 -f -o "$out/$c" python3 -P bench/feedback_drive.py "$task" "$cand" > "$out/$c.ncu.log" 2>&1
  rc=$?
  for page in details raw; do
    "$ncu" --import "$out/$c.ncu-rep" --csv --page $page --print-units base > "$out/$c.$page.csv" 2>> "$out/$c.ncu.log"
  done
  "$ncu" --import "$out/$c.ncu-rep" --csv --page source --print-source cuda,sass > "$out/$c.source.csv" 2>> "$out/$c.ncu.log" \
    || "$ncu" --import "$out/$c.ncu-rep" --csv --page source --print-source sass > "$out/$c.source.csv" 2>> "$out/$c.ncu.log"
  echo "$c: rc=$rc $(( $(date +%s) - t0 ))s details=$(wc -l < "$out/$c.details.csv") source=$(wc -l < "$out/$c.source.csv")"
done
