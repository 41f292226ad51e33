#!/usr/bin/env bash
# Lay KernelBench's level-1 and level-2 task files and its published H100 timings out in .kb/
# (ignored by git), for `bench/device_run.sh "baseline:.kb/level1 .kb/level2"` (carry .kb).
# Usage: bench/kb_tasks.sh KERNELBENCH_GIT_DIR [REV]   (a clone, or the fetch tool's mirror)
set -euo pipefail
src=${1:?a KernelBench git directory}
rev=${2:-HEAD}
rm -rf .kb && mkdir -p .kb
git -C "$src" archive "$rev" KernelBench/level1 KernelBench/level2 LICENSE \
  results/timing/H100_Modal/baseline_time_torch.json \
  results/timing/H100_Modal/baseline_time_torch_compile_inductor_default.json | tar -x -C .kb
mv .kb/KernelBench/level1 .kb/KernelBench/level2 .kb/ && rmdir .kb/KernelBench
mv .kb/results/timing/H100_Modal/baseline_time_torch.json .kb/
mv .kb/results/timing/H100_Modal/baseline_time_torch_compile_inductor_default.json .kb/baseline_time_torch_compile.json
rm -rf .kb/results
echo "KernelBench $(git -C "$src" rev-parse --short "$rev"): $(ls .kb/level1 | wc -l) level-1 and $(ls .kb/level2 | wc -l) level-2 tasks in .kb/"
