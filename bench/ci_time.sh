#!/usr/bin/env bash
# CI's time on this machine: a fresh clone of this repository at COMMIT, `bash .ci/run` in it, timed, with the
# CPU-seconds the whole machine was busy meanwhile (/proc/stat: user, nice, system, irq, softirq, steal).
# Run it with nothing else running: the machine's other work counts too.
#
#   bash bench/ci_time.sh COMMIT [MARK]
#
# MARK, if given, replaces the README test command's marker expression (`-m 'not slow'`) in the clone, so that
# the same install runs another tier: `slow` for the slow tier, '' for the whole suite, 'not slow' for CI's tier
# on a commit from before the tiers.
# Prints one line: commit, exit code, wall seconds, busy CPU-seconds; the log is OUT/ci_time-COMMIT.log.
set -uo pipefail
commit=$1
out=${OUT:-/tmp}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
dir=$(mktemp -d /tmp/ci-time-XXXXXX)
git clone -q "$repo" "$dir" && git -C "$dir" checkout -q "$commit" || exit 2
if [ $# -ge 2 ]; then  # the test command's marker expression, whatever it was (none in older READMEs), becomes MARK's
    sed -i -E "/--dist loadgroup/{s/ -m '[^']*'//; ${2:+s/--dist loadgroup/--dist loadgroup -m '$2'/}}" "$dir/README.md"
fi
busy() { read -r _ u n s _ _ q sq st _ < /proc/stat; echo $((u + n + s + q + sq + st)); }
b0=$(busy); t0=$(date +%s.%N)
(cd "$dir" && bash .ci/run) > "$out/ci_time-$commit.log" 2>&1
rc=$?
t1=$(date +%s.%N); b1=$(busy)
echo "commit=$commit rc=$rc wall_s=$(echo "$t1 - $t0" | bc) busy_cpu_s=$(( (b1 - b0) / 100 ))"
rm -rf "$dir"
