#!/usr/bin/env bash
# wait_setup.sh STEP [STAGE]: the set-up test of a ctest fixture (Note [Set-up gates] in
# tests/CMakeLists.txt). scripts/test.sh starts the tests while its background steps (the Go
# builds of `setup.sh --tools`, the images) are still running, each writing STEP.pid, its output
# to STEP.log and, when it ends, its exit status to STEP.rc in $LOCKSTEP_SETUP_STATUS; a step
# marks the stages it passes there too (STAGE.done). This waits for STAGE.done (with a STAGE)
# or STEP.rc, and passes if the stage was reached or the step succeeded; if the step failed
# first, ended without reaching the stage, or its process is gone without saying, it fails with
# the end of the step's output. Outside scripts/test.sh (LOCKSTEP_SETUP_STATUS unset) there is
# nothing to wait for, and it passes at once.
set -euo pipefail
step=${1:?usage: wait_setup.sh STEP [STAGE]}
stage=${2:-}
dir=${LOCKSTEP_SETUP_STATUS:-}
if [[ -z $dir ]]; then
  echo "no background set-up (LOCKSTEP_SETUP_STATUS unset: not run by scripts/test.sh); nothing to wait for"
  exit 0
fi
what="the set-up's $step${stage:+ (stage $stage)}"
rc_file="$dir/$step.rc" log="$dir/$step.log"
[[ -e $rc_file || -e $dir/$step.pid ]] || { echo "no background step '$step' in $dir"; exit 1; }
show_log() { tail -n 60 "$log" 2>/dev/null || true; }
start=$SECONDS
next=60
until [[ -n $stage && -e $dir/$stage.done ]] || [[ -e $rc_file ]]; do
  if ! kill -0 "$(cat "$dir/$step.pid")" 2>/dev/null && [[ ! -e $rc_file ]]; then
    echo "$what: the step ended without an exit status (killed?); the end of its output ($log):"
    show_log
    exit 1
  fi
  if ((SECONDS - start >= next)); then
    echo "waiting for $what: $((SECONDS - start)) s"
    next=$((next + 60))
  fi
  sleep 1
done
if [[ -n $stage && -e $dir/$stage.done ]]; then
  echo "$what: there (waited $((SECONDS - start)) s)"
  exit 0
fi
rc=$(cat "$rc_file")
if [[ $rc != 0 ]]; then
  echo "$what: the step failed (exit $rc); the end of its output ($log):"
  show_log
  exit 1
fi
if [[ -n $stage ]]; then
  echo "$what: the step ended without reaching the stage; the end of its output ($log):"
  show_log
  exit 1
fi
echo "$what: done (waited $((SECONDS - start)) s)"
