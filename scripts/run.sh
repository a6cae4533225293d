#!/usr/bin/env bash
# The main job: run a TrainingJob from its YAML on this machine with `lockstep run`, after
# the set-up and build it needs (both cached). The same YAML runs on a cluster with
# `kubectl apply -f`. Default: examples/ddp.yaml (2 nodes x 2 workers, DDP, the tiny GPT on
# the built-in synthetic task; about 15 s on two cores). Ctrl-C stops every process.
#
# Only what the main job uses is set up and built: LibTorch, lockstep-trainer, lockstep-agent,
# the `lockstep` command and their Debian packages (scripts/setup.sh --run). The test control
# plane, the cluster tier and the test-only packages are the test command's (scripts/test.sh).
# `lockstep` is then linked onto the PATH (link_lockstep below); LOCKSTEP_BIN_DIR picks where.
set -euo pipefail
source "$(dirname "$0")/common.sh"
job=${1:-$ROOT/examples/ddp.yaml}
[[ -f $job ]] || die "no such TrainingJob file: $job"
start=$SECONDS
log "run: setting up and building what $(basename "$job") needs (LibTorch, trainer, agent, lockstep; cached after the first run)"
"$ROOT/scripts/setup.sh" --run
"$ROOT/scripts/build.sh" lockstep lockstep-agent lockstep-trainer

# link_lockstep: `lockstep` on the PATH, as a symlink to the build tree's binary (which finds
# lockstep-agent and lockstep-trainer beside it in the build tree). Into LOCKSTEP_BIN_DIR if
# set, else ~/.local/bin when that is on the PATH, else /usr/local/bin when writable (root),
# else ~/.local/bin with a word on how to put it on the PATH. A file there that is not our
# link is left alone.
link_lockstep() {
  local target="$BUILD_DIR/cli/lockstep" dir=${LOCKSTEP_BIN_DIR:-}
  if [[ -z $dir ]]; then
    if [[ :$PATH: == *":$HOME/.local/bin:"* ]]; then dir=$HOME/.local/bin
    elif [[ -w /usr/local/bin ]]; then dir=/usr/local/bin
    else dir=$HOME/.local/bin
    fi
  fi
  local link="$dir/lockstep"
  if [[ -e $link && ! -L $link ]]; then
    log "lockstep: $link exists and is not a link; left alone. This build's lockstep: $target"
    return 0
  fi
  mkdir -p "$dir" && ln -sfn "$target" "$link" || { log "lockstep: could not link $link; this build's lockstep: $target"; return 0; }
  if [[ $(command -v lockstep) == "$link" ]]; then
    log "lockstep: on your PATH as $link -> $target"
  else
    log "lockstep: linked as $link -> $target; $dir is not first on your PATH: export PATH=$dir:\$PATH"
  fi
}
link_lockstep
log "run: set-up and build took $((SECONDS - start)) s; starting the job"
exec "$BUILD_DIR/cli/lockstep" run "$job"
