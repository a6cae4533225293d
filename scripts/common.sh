# Shared by the set-up, build and run scripts. Source it; do not run it.
# Everything downloaded or built lives under $LOCKSTEP_CACHE, outside the repository.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${LOCKSTEP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockstep}
# shellcheck source=versions.env
source "$ROOT/scripts/versions.env"

LIBTORCH_DIR="$CACHE/libtorch-$TORCH_VERSION-cpu"
K8S_BIN="$CACHE/kubernetes-$KUBERNETES_VERSION/bin"
TOOLS_BIN="$CACHE/kubectl-layer-$KUBECTL_LAYER_VERSION/bin"
# One build tree per checkout, so a fresh clone elsewhere never trips over another's CMakeCache.
BUILD_TYPE=${LOCKSTEP_BUILD_TYPE:-Release}
BUILD_DIR=${LOCKSTEP_BUILD_DIR:-$CACHE/build/$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)-$BUILD_TYPE}

export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local GOFLAGS=-mod=readonly
export CCACHE_DIR="$CACHE/ccache"
export PATH="$K8S_BIN:$TOOLS_BIN:$PATH"

log() { printf '[lockstep %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[lockstep] error: %s\n' "$*" >&2; exit 1; }

# run_with_heartbeat DESC CMD...: runs CMD, printing a line every 20 s while it works, so a
# long quiet step (a Go build) never looks hung. Ctrl-C stops CMD and its children.
run_with_heartbeat() {
  local desc=$1; shift
  local start=$SECONDS
  "$@" &
  local pid=$!
  trap 'pkill -TERM -P $pid 2>/dev/null; kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; trap - INT TERM; exit 130' INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
      sleep 1; kill -0 "$pid" 2>/dev/null || break
    done
    kill -0 "$pid" 2>/dev/null && log "  $desc: still working ($((SECONDS - start)) s)"
  done
  local rc=0; wait "$pid" || rc=$?
  trap - INT TERM
  return $rc
}
