#!/usr/bin/env bash
# scripts/failures.sh [BUILD_DIR]: what each failed test of the last ctest run said, short, for
# the end of scripts/test.sh's output. ctest's --output-on-failure prints a failed test's whole
# output where it ends, among the other lane's lines; a CI log that keeps only its head and tail
# then loses why a test failed (2026-11-30: nodes_in_cluster_test's failure was cut out). This
# prints, per failed test, its googletest failures (from each "file:line: Failure" to the next
# test line, at most 40 lines each) and the "[  FAILED  ]" lines, or, for a test that is not a
# googletest, its last 30 lines.
set -euo pipefail
source "$(dirname "$0")/common.sh"
dir=${1:-$BUILD_DIR}/Testing/Temporary
[[ -s $dir/LastTestsFailed.log ]] || exit 0
echo "==================== why the failed tests failed (from $dir/LastTest.log) ===================="
while IFS=: read -r _ name; do
  [[ -n $name ]] || continue
  echo "---- $name"
  # The test's output: between its "N/M Testing: NAME" header's "Output:" rule and "<end of output>".
  output=$(awk -v name="$name" '
    $0 ~ "^[0-9]+/[0-9]+ Testing: " && $3 == name { inside = 1; out = 0; next }
    inside && /^Output:$/ { out = 1; getline; next }
    inside && out && /^<end of output>$/ { exit }
    inside && out { print }
  ' "$dir/LastTest.log")
  if grep -q '^\[==========\]' <<< "$output"; then
    awk '
      /: Failure$/ { show = 1; n = 0 }
      /^\[( RUN      |       OK |  FAILED  )\]/ { show = 0 }
      show && n++ < 40 { print }
      /^\[  FAILED  \] .*\(/ { print }
    ' <<< "$output"
  else
    tail -n 30 <<< "$output"
  fi
done < "$dir/LastTestsFailed.log"
