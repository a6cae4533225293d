#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up (cached), build, then every test tier
# through ctest. Tests that need something this machine lacks (a GPU) say SKIPPED; tests
# that need what set-up provides fail rather than skip (LOCKSTEP_REQUIRE_ALL=1).
# Extra arguments go to ctest, e.g. scripts/test.sh -L controlplane or -R crd_test.
set -euo pipefail
source "$(dirname "$0")/common.sh"
start=$SECONDS
# Note [Set-up beside the build]
# What the C++ build needs (Debian packages, LibTorch: `setup.sh --build`) comes first; the rest
# of the set-up (`setup.sh --tools`: the Go builds of the control plane, the cluster and KWOK,
# kubectl and helm; minutes on a fresh machine, cached after) then runs beside the build, its Go
# builds under nice so that the build keeps the cores it can use and the Go builds take the rest
# (the build's links and its longest files leave one core idle for minutes; the Go builds' module
# downloads leave both). Beside them too, the root file systems that are mostly downloads and
# unpacking, once (cached after): the CPU-only Python torch the `pytorch` image holds, the Debian
# bullseye root bundle_test runs the agent's bundle in (glibc older than ours) and the images'
# Debian bases (debootstrap); their output goes to a log, shown if they fail, and the steps after
# the build find them cached, or make them then and say why. The set-up's output shows among the
# build's. Ctrl-C stops all of it (the caches are renamed into place only when complete).
# (Measured 2026-11-28: where the kernel groups tasks by session for scheduling, as this machine
# kind does (/proc/sys/kernel/sched_autogroup_enabled = 1), each setsid'd background step gets a
# share of the cores equal to the build's whatever its nice, so the Go builds take about half of
# them while the build runs. That happens to end the cluster's Go builds with the C++ build,
# which the cluster lane needs both of; the build alone would end sooner and the Go builds later.)
# Then the tests start as soon as the build is done (Note [Set-up gates] in tests/CMakeLists.txt):
# the set-up's Go builds, no longer under nice, and the images go on in the background, and the
# tests that need them wait for them; the others (the trainer's, the agent's, the CLI's, ...) run
# meanwhile.
"$ROOT/scripts/setup.sh" --build
roots_log="$CACHE/test-roots.log"
# The background steps' status (wait_setup.sh reads it): STEP.pid, STEP.log and, at its end, STEP.rc.
status=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-setup.XXXXXX")
# bg_step NAME COMMAND...: COMMAND in a session of its own (setsid: Ctrl-C reaches it through the
# trap below, which stops it), its output shown here and kept in $status/NAME.log.
bg_step() {
  local name=$1; shift
  setsid bash -c 'set -o pipefail; "${@:2}" 2>&1 | tee "$1.log"; echo "$?" > "$1.rc.tmp"; mv "$1.rc.tmp" "$1.rc"' \
    bash "$status/$name" "$@" &
  echo $! > "$status/$name.pid"
}
touch "$status/building"
bg_step tools env LOCKSTEP_NICE_WHILE="$status/building" LOCKSTEP_SETUP_MARKS="$status" "$ROOT/scripts/setup.sh" --tools
setsid bash -c '"$0/scripts/python-torch.sh" > /dev/null && "$0/scripts/old-glibc-root.sh" > /dev/null && "$0/scripts/images.sh" bases' \
  "$ROOT" > "$roots_log" 2>&1 &
roots=$!
# However this script ends before they do (a failed build, Ctrl-C, a run of some tests only that
# needed none of them), they are stopped; the next run resumes from what the caches kept.
stop_background() {
  local f
  # (|| true: this runs under set -e, and a failing kill here would make the script's status 1.)
  for f in "$status"/*.pid; do if [[ -e $f ]]; then kill -- "-$(cat "$f")" 2>/dev/null || true; fi; done
  kill -- "-$roots" 2>/dev/null || true
  rm -rf "$status"
}
trap stop_background EXIT
trap 'echo; log "interrupted"; exit 130' INT TERM
log "set-up: the Go tools are built beside the C++ build; the root file systems too (log: $roots_log)"
"$ROOT/scripts/build.sh"
# The build's cores are free: the Go builds go on at full priority (renice lowers the niceness
# of the one under way where allowed: as root), among the tests.
rm -f "$status/building"
renice -n 0 -g "$(cat "$status/tools.pid")" > /dev/null 2>&1 || true
if wait $roots; then log "root file systems: ready"
else log "root file systems: the background run failed (its log follows); made again below"; cat "$roots_log" >&2; fi
# The Debian bullseye root (glibc older than ours) bundle_test runs the agent's bundle in
# (cached: made once, about 2 minutes); without it bundle_test fails and says why.
if old_glibc_root=$("$ROOT/scripts/old-glibc-root.sh"); then export LOCKSTEP_OLD_GLIBC_ROOT=$old_glibc_root
else log "old-glibc root: not made (see above); bundle_test will fail with the reason"; fi
# The container images of this build (cached: seconds when nothing changed); the cluster tier and
# built_images_test wait for them.
bg_step images "$ROOT/scripts/images.sh" build
log "build took $((SECONDS - start)) s; running the tests (those that need the set-up's Go builds or the images wait for them)"
export LOCKSTEP_SETUP_STATUS=$status
export LOCKSTEP_K8S_BIN="$K8S_BIN" LOCKSTEP_PROMETHEUS_BIN="$PROMETHEUS_BIN/prometheus" LOCKSTEP_REQUIRE_ALL=1 \
  LOCKSTEP_KWOK_BIN="$KWOK_BIN/kwok" LOCKSTEP_GANG_SCHEDULER_BIN="$SCHEDULER_PLUGINS_BIN/kube-scheduler-cosched" \
  LOCKSTEP_PYTHON_TORCH="$PYTHON_TORCH_DIR" LOCKSTEP_GRAFANA_SCHEMA_BIN="$GRAFANA_SCHEMA_BIN/grafana-schema-check" \
  LOCKSTEP_KUEUE_DIR="$KUEUE_DIR"
# Two lanes side by side (Note [Two lanes] in tests/CMakeLists.txt): the real-node cluster's
# suites, and every other test; each lane one test at a time, and beside them at most two set-up
# gates, which only wait. `scripts/test.sh -j1` runs one test at a time in all.
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 -j4 "$@" || rc=$?
# Each failed test's failures again, short, at the end where a log cut in the middle keeps them.
((rc == 0)) || "$ROOT/scripts/failures.sh" "$BUILD_DIR" || true
for step in tools images; do
  if [[ ! -e $status/$step.rc ]]; then log "set-up: $step was still running when the tests ended (none of them needed it); stopped"
  elif [[ $(cat "$status/$step.rc") != 0 ]]; then log "set-up: $step failed (exit $(cat "$status/$step.rc")); its output is above"; ((rc)) || rc=1
  fi
done
log "set-up, build and tests took $((SECONDS - start)) s"
exit "$rc"
