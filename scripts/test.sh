#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up (cached), build, then every test tier
# through ctest. Tests that need something this machine lacks (a GPU) say SKIPPED; tests
# that need what set-up provides fail rather than skip (LOCKSTEP_REQUIRE_ALL=1).
# Extra arguments go to ctest, e.g. scripts/test.sh -L controlplane or -R crd_test.
set -euo pipefail
source "$(dirname "$0")/common.sh"
start=$SECONDS
"$ROOT/scripts/setup.sh"
# While the C++ build keeps both cores busy, the root file systems that are mostly downloads and
# unpacking are made beside it, once (cached after): the Debian bullseye root bundle_test runs
# the agent's bundle in (glibc older than ours) and the images' Debian bases (debootstrap).
# Their output goes to a log, shown if they fail; the steps after the build find them cached,
# or make them then and say why. Ctrl-C stops them too (their caches are renamed into place
# only when complete).
roots_log="$CACHE/test-roots.log"
# In a session of its own (setsid): Ctrl-C reaches it through the trap, which stops all of it.
setsid bash -c '"$0/scripts/old-glibc-root.sh" > /dev/null && "$0/scripts/images.sh" bases' "$ROOT" > "$roots_log" 2>&1 &
roots=$!
trap 'kill -- -$roots 2>/dev/null; echo; log "interrupted"; exit 130' INT TERM
log "root file systems: made in the background while the build runs (log: $roots_log)"
"$ROOT/scripts/build.sh"
if wait $roots; then log "root file systems: ready"
else log "root file systems: the background run failed (its log follows); made again below"; cat "$roots_log" >&2; fi
trap - INT TERM
# The container images of this build (cached: seconds when nothing changed); built_images_test
# checks them, and says why when they could not be built.
"$ROOT/scripts/images.sh" build || log "images: not built (see above); built_images_test will fail with the reason"
# The Debian bullseye root (glibc older than ours) bundle_test runs the agent's bundle in
# (cached: made once, about 2 minutes); without it bundle_test fails and says why.
if old_glibc_root=$("$ROOT/scripts/old-glibc-root.sh"); then export LOCKSTEP_OLD_GLIBC_ROOT=$old_glibc_root
else log "old-glibc root: not made (see above); bundle_test will fail with the reason"; fi
log "set-up and build took $((SECONDS - start)) s; running the tests"
export LOCKSTEP_K8S_BIN="$K8S_BIN" LOCKSTEP_PROMETHEUS_BIN="$PROMETHEUS_BIN/prometheus" LOCKSTEP_REQUIRE_ALL=1 \
  LOCKSTEP_KWOK_BIN="$KWOK_BIN/kwok" LOCKSTEP_GANG_SCHEDULER_BIN="$SCHEDULER_PLUGINS_BIN/kube-scheduler-cosched" \
  LOCKSTEP_PYTHON_TORCH="$PYTHON_TORCH_DIR" LOCKSTEP_GRAFANA_SCHEMA_BIN="$GRAFANA_SCHEMA_BIN/grafana-schema-check"
# Two lanes side by side (Note [Two lanes] in tests/CMakeLists.txt): the real-node cluster's
# suites, and every other test; each lane one test at a time. `scripts/test.sh -j1` runs one test
# at a time in all.
exec ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 900 -j2 "$@"
