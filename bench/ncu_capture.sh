#!/usr/bin/env bash
# Capture real Nsight Compute CSV for the profile parser's fixtures (issue 5).
# usage: bench/ncu_capture.sh OUTDIR
out=${1:?outdir}; mkdir -p "$out"
sections="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis"
for k in relu matmul many_small; do
  timeout 240 ncu --csv --page details $sections --nvtx --nvtx-include "kernelfix_candidate/" --target-processes all \
      python3 bench/ncu_targets.py $k > "$out/ncu_${k}_details.csv" 2> "$out/ncu_${k}_details.err"
  echo "$k details rc=$? lines=$(wc -l < "$out/ncu_${k}_details.csv")"
done
timeout 120 ncu --csv --page raw --metrics gpu__time_duration.sum,dram__bytes.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \
    --nvtx --nvtx-include "kernelfix_candidate/" python3 bench/ncu_targets.py relu > "$out/ncu_relu_raw.csv" 2> "$out/ncu_relu_raw.err"
echo "relu raw rc=$?"
