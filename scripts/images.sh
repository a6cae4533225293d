#!/usr/bin/env bash
# The container images, built on this machine without Docker and without a registry:
#   scripts/images.sh build  [operator|trainer|agent|pytorch|all]   build what changed (default: all)
#   scripts/images.sh import [operator|trainer|agent|pytorch|all]   into containerd's k8s.io namespace
#   scripts/images.sh path   operator|trainer|agent|pytorch         the docker-archive `ctr images import` takes
#   scripts/images.sh bases  [operator|trainer|pytorch|all]          only the Debian bases (no build tree needed)
#   scripts/images.sh clean                                         forget every cached base and image
#
# An image is a Debian root file system (`debootstrap --variant=minbase` of the pinned suite
# and runtime packages, scripts/versions.env), the LibTorch libraries the binaries link (the
# trainer), and the project's own `cmake --install --component ...` tree at the paths
# docker/*.Dockerfile uses, with the Dockerfile's USER and ENTRYPOINT; umoci packs it as an
# OCI image and skopeo writes the archive. The recipe per image is in the table below;
# tests/images/built_images_test.cpp checks it against the Dockerfiles. The agent image
# (docker/agent.Dockerfile) has no Debian base: it is `FROM scratch` plus the agent bundle
# (`--component agent-bundle` at /lockstep), which its init container copies into each pod.
# `pytorch` is a test image with no Dockerfile and no Lockstep file: a stand-in for a user's stock
# PyTorch image (Debian, python3, torch in its dist-packages: scripts/python-torch.sh's CPU-only tree,
# which must be made first), for tests that bring Lockstep into any image. It needs no build tree.
#
# Cached by content under $CACHE/images (see docs/development.md, "Images without Docker"):
#   base/<key>   the packed Debian root; key: suite, mirror, architecture, package list
#   libs/<key>   base + the LibTorch layer; key: base key, every library's sha256
#   image/<name>-<key>   the image and its archive; key: the layers below it, the install
#                tree's files and modes, the image config and this script
# Each is made in $CACHE/images/tmp and renamed into place when complete, so Ctrl-C leaves
# no half-made entry. The build tree ($BUILD_DIR, as scripts/build.sh) must be built first;
# $BUILD_DIR/images/<name> then links to its image (the tests read it there).
#
# Import: LOCKSTEP_CONTAINERD_ADDRESS (or --address) names containerd's socket (default
# /run/containerd/containerd.sock); LOCKSTEP_CONTAINERD_SNAPSHOTTER picks the snapshotter.
set -euo pipefail
source "$(dirname "$0")/common.sh"

IMAGES="$CACHE/images"
VERSION=$(sed -n 's/^project(lockstep VERSION \([0-9.]*\).*/\1/p' "$ROOT/CMakeLists.txt")
ARCH=$(dpkg --print-architecture)
BASE_FORMAT=2  # bump when the base recipe below changes in a way its key does not see

# --- the images (mirrors docker/<name>.Dockerfile's runtime stage) ---------------------------
declare -A COMPONENTS=([operator]="operator" [trainer]="agent trainer" [agent]="agent-bundle" [pytorch]="")
declare -A PACKAGES=([operator]="$IMAGE_OPERATOR_PACKAGES" [trainer]="$IMAGE_TRAINER_PACKAGES" [agent]="" [pytorch]="$IMAGE_PYTORCH_PACKAGES")
declare -A USER_SPEC=([operator]="65532:65532" [trainer]="1000" [agent]="65532:65532" [pytorch]="1000")
declare -A ENTRYPOINT=([operator]="/usr/local/bin/lockstep-operator" [trainer]="" [agent]="" [pytorch]="")
declare -A ADD_USER=([operator]="" [trainer]="useradd --uid 1000 --create-home lockstep" [agent]="" [pytorch]="useradd --uid 1000 --create-home user")
# The install prefix of each image's components; "/" for the scratch image (the bundle's /lockstep).
declare -A PREFIX=([operator]="/usr/local" [trainer]="/usr/local" [agent]="/" [pytorch]="/usr/local")
SCRATCH_IMAGES=" agent "  # no Debian base, no libraries layer: the bundle carries its own
# Where the image holds scripts/python-torch.sh's tree ($PYTHON_TORCH_DIR), if at all, and what the
# image's own user must be able to run before it is packed.
declare -A PYTHON_TORCH_AT=([operator]="" [trainer]="" [agent]="" [pytorch]="/usr/local/lib/python3.11/dist-packages")
declare -A CHECK=([operator]="" [trainer]="" [agent]="" [pytorch]="python3 -c 'import torch; assert not torch.cuda.is_available()'")
# Libraries outside Debian's (LibTorch) go here; an ld.so.conf.d entry makes them found.
PRIVATE_LIB_DIR=/usr/local/lib/libtorch
IMAGE_PATH_ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin  # debian:bookworm-slim's

ref() { echo "lockstep/$1:$VERSION"; }
usage() { die "usage: scripts/images.sh build|import [operator|trainer|agent|pytorch|all] | path operator|trainer|agent|pytorch | clean"; }
sha() { sha256sum | cut -c1-16; }

# --- temporary directories, Ctrl-C ------------------------------------------------------------
TMP_DIRS=()
CHILD=""
new_tmp() {  # new_tmp VAR NAME: VAR names a fresh directory under $IMAGES/tmp, removed on exit
  local d
  d=$(mktemp -d "$IMAGES/tmp/$2.XXXXXX")
  chmod 0755 "$d"  # not mktemp's 0700: copied into an image, it would lock out a non-root user
  TMP_DIRS+=("$d")
  printf -v "$1" '%s' "$d"
}
# remove_tree DIR: unmounts what a killed debootstrap may have left mounted (proc, sys), then
# removes DIR without crossing into another file system.
remove_tree() {
  [[ -e $1 ]] || return 0
  local m
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v d="$1/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
  rm -rf --one-file-system "$1"
}
cleanup() { local d; for d in "${TMP_DIRS[@]}"; do remove_tree "$d"; done; }
# on_signal SIG: stops the running step, removes the unfinished work, then dies of SIG, so a
# calling script (scripts/test.sh) stops too rather than going on.
on_signal() {
  trap - INT TERM
  if [[ -n $CHILD ]]; then kill -TERM -- "-$CHILD" 2>/dev/null || true; wait "$CHILD" 2>/dev/null || true; fi
  log "interrupted; removing the unfinished work (cached entries are untouched)"
  cleanup
  trap - EXIT
  kill -s "$1" $$
}
trap cleanup EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

# step DESC LOG CMD...: runs CMD in its own process group with its output in LOG, printing
# DESC, the elapsed time and LOG's last line every 15 s; on failure, LOG's tail and exit.
step() {
  local desc=$1 logf=$2; shift 2
  local start=$SECONDS
  setsid "$@" > "$logf" 2>&1 &
  CHILD=$!
  while kill -0 "$CHILD" 2>/dev/null; do
    for _ in $(seq 15); do sleep 1; kill -0 "$CHILD" 2>/dev/null || break; done
    kill -0 "$CHILD" 2>/dev/null && log "  $desc: $((SECONDS - start)) s, $(tail -n1 "$logf" | cut -c1-90)"
  done
  local rc=0; wait "$CHILD" || rc=$?
  CHILD=""
  if ((rc)); then tail -n 20 "$logf" >&2; die "$desc failed (exit $rc); the whole log: $logf"; fi
}

need_tools() {
  local t missing=()
  for t in debootstrap umoci skopeo chroot; do command -v "$t" >/dev/null || missing+=("$t"); done
  ((${#missing[@]} == 0)) || die "${missing[*]} not found; scripts/setup.sh installs them (Debian packages debootstrap umoci skopeo)"
  [[ $(id -u) -eq 0 ]] || die "building images needs root (debootstrap, chroot, file ownership in the image)"
}

# debian_mirror: LOCKSTEP_DEBIAN_MIRROR, else the first apt source of $IMAGE_DEBIAN_SUITE that this
# machine is configured with (one-line .list or deb822 .sources).
debian_mirror() {
  if [[ -n ${LOCKSTEP_DEBIAN_MIRROR:-} ]]; then echo "$LOCKSTEP_DEBIAN_MIRROR"; return; fi
  local m="" f files=()
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && files+=("$f")
  done
  ((${#files[@]})) && m=$(awk -v suite="$IMAGE_DEBIAN_SUITE" '
    FNR == 1 { types = uris = suites = "" }
    FILENAME ~ /\.list$/ && $1 == "deb" {
      i = 2; if ($2 ~ /^\[/) while ($i !~ /\]$/) i++; if ($2 ~ /^\[/) i++
      if ($(i + 1) == suite) { print $i; exit }
    }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^[ \t]*$/) { types = uris = suites = "" }
      else if ($1 == "Types:") types = " " $0 " "
      else if ($1 == "URIs:") uris = $2
      else if ($1 == "Suites:") suites = " " $0 " "
      if (types ~ / deb / && uris != "" && suites ~ (" " suite " ")) { print uris; exit }
    }' "${files[@]}")
  [[ -n $m ]] || die "no apt source for Debian $IMAGE_DEBIAN_SUITE in /etc/apt/sources.list*; set LOCKSTEP_DEBIAN_MIRROR (e.g. http://deb.debian.org/debian)"
  echo "${m%/}"
}

# copy_layout SRC DST: an OCI layout to extend; blobs are immutable, so they are hard links.
copy_layout() {
  mkdir -p "$2"
  cp -a --link "$1/blobs" "$2/"
  cp "$1/index.json" "$1/oci-layout" "$2/"
}

# tree_manifest DIR: every path with its type, mode, owner and link target, and every file's
# sha256: what an image layer made from DIR would hold.
tree_manifest() {
  (cd "$1" && find . -printf '%y %m %U:%G %p %l\n' | LC_ALL=C sort &&
     find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum)
}

# --- 1. the Debian base ---------------------------------------------------------------------------
# ensure_base NAME: sets BASE to the cached base layout (tag "base") for NAME's package list.
ensure_base() {
  local name=$1 mirror packages inputs key
  mirror=$(debian_mirror)
  packages=$(tr ' ' '\n' <<< "${PACKAGES[$name]}" | grep . | LC_ALL=C sort -u | paste -sd, -)
  inputs="format=$BASE_FORMAT suite=$IMAGE_DEBIAN_SUITE variant=minbase arch=$ARCH mirror=$mirror packages=$packages"
  key=$(sha <<< "$inputs")
  BASE="$IMAGES/base/$key"
  if [[ -f $BASE/oci/index.json ]]; then log "base $key: cached ($packages)"; return; fi
  local tmp start=$SECONDS
  new_tmp tmp "base-$key"
  mkdir -p "$IMAGES/debs"
  log "base $key: debootstrap --variant=minbase $IMAGE_DEBIAN_SUITE from $mirror with $packages (about a minute, once)"
  step "debootstrap" "$tmp/debootstrap.log" nice debootstrap --variant=minbase --arch="$ARCH" --include="$packages" \
    --cache-dir="$IMAGES/debs" "$IMAGE_DEBIAN_SUITE" "$tmp/rootfs" "$mirror"
  log "  debootstrap: $((SECONDS - start)) s, $(du -sh "$tmp/rootfs" | cut -f1)"
  chroot "$tmp/rootfs" dpkg-query -W -f '${Package} ${Version}\n' > "$tmp/packages.txt"
  # What debian:bookworm-slim also leaves out: package lists, downloaded .debs, logs, manuals,
  # translations and documentation but its copyright files (a third of the base).
  local r="$tmp/rootfs"
  rm -rf "$r/var/lib/apt/lists/"* "$r/var/cache/apt/"*.bin "$r/var/cache/apt/archives/"*.deb "$r/var/log/"* \
    "$r/usr/share/man/"* "$r/usr/share/info/"* "$r/usr/share/locale/"* "$r/usr/share/groff/"* "$r/usr/share/lintian/"*
  find "$r/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  umoci init --layout "$tmp/oci"
  umoci new --image "$tmp/oci:base"
  step "packing the base layer" "$tmp/umoci.log" nice umoci insert --image "$tmp/oci:base" \
    --history.created_by "debootstrap --variant=minbase --include=$packages $IMAGE_DEBIAN_SUITE $mirror" "$tmp/rootfs" /
  remove_tree "$tmp/rootfs"
  echo "$inputs" > "$tmp/inputs.txt"
  mkdir -p "$IMAGES/base"
  mv "$tmp" "$BASE"
  log "base $key: ready in $((SECONDS - start)) s"
}

# --- 2. libraries from outside Debian (LibTorch) ----------------------------------------------------
# private_libs DIR: the libraries DIR's binaries load from outside the system library directories.
private_libs() {
  local b
  for b in "$1"/usr/local/bin/*; do [[ -e $b ]] && ldd "$b"; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | grep -Ev ' /(usr/)?lib(64|32)?/' | LC_ALL=C sort -u || true
}

# ensure_libs NAME INSTALL: sets PARENT/PARENT_TAG to the base, plus a layer with the private
# libraries of INSTALL's binaries in $PRIVATE_LIB_DIR when there are any.
ensure_libs() {
  local name=$1 install=$2 libs key
  PARENT=$BASE PARENT_TAG=base
  libs=$(private_libs "$install")
  [[ -n $libs ]] || return 0
  key=$(printf '%s\n' "$(basename "$BASE")" "$PRIVATE_LIB_DIR" "$(while read -r soname path; do
      echo "$soname $(sha256sum < "$path" | cut -c1-64)"; done <<< "$libs")" | sha)
  PARENT="$IMAGES/libs/$key" PARENT_TAG=libs
  if [[ -f $PARENT/oci/index.json ]]; then log "libraries $key: cached ($(wc -l <<< "$libs") from outside Debian)"; return; fi
  local tmp start=$SECONDS soname path
  new_tmp tmp "libs-$key"
  mkdir -p "$tmp/layer$PRIVATE_LIB_DIR" "$tmp/layer/etc/ld.so.conf.d"
  while read -r soname path; do cp -L "$path" "$tmp/layer$PRIVATE_LIB_DIR/$soname"; done <<< "$libs"
  chmod 0644 "$tmp/layer$PRIVATE_LIB_DIR"/*
  echo "$PRIVATE_LIB_DIR" > "$tmp/layer/etc/ld.so.conf.d/libtorch.conf"
  log "libraries $key: packing $(awk '{print $1}' <<< "$libs" | paste -sd' ' -) ($(du -sh "$tmp/layer" | cut -f1))"
  copy_layout "$BASE/oci" "$tmp/oci"
  umoci tag --image "$tmp/oci:base" libs
  step "packing the library layer" "$tmp/umoci.log" nice umoci insert --image "$tmp/oci:libs" \
    --history.created_by "LibTorch libraries into $PRIVATE_LIB_DIR" "$tmp/layer" /
  umoci rm --image "$tmp/oci:base"
  umoci gc --layout "$tmp/oci"
  rm -rf "$tmp/layer"
  mkdir -p "$IMAGES/libs"
  mv "$tmp" "$PARENT"
  log "libraries $key: ready in $((SECONDS - start)) s"
}

# --- 3. the image -----------------------------------------------------------------------------------
# stage_install NAME DIR: NAME's install components into DIR, at the Dockerfile's prefix, and the
# Python torch tree where NAME holds it.
stage_install() {
  local c
  for c in ${COMPONENTS[$1]}; do
    DESTDIR=$2 cmake --install "$BUILD_DIR" --component "$c" --prefix "${PREFIX[$1]}" > /dev/null ||
      die "cmake --install of component $c failed; build it first (scripts/build.sh, or cmake --build $BUILD_DIR)"
  done
  if [[ -n ${PYTHON_TORCH_AT[$1]} ]]; then
    [[ -f $PYTHON_TORCH_DIR/.complete ]] ||
      die "$(ref "$1") holds the CPU-only Python torch, and $PYTHON_TORCH_DIR is not made; run scripts/python-torch.sh (scripts/setup.sh does)"
    mkdir -p "$2${PYTHON_TORCH_AT[$1]}"
    # Hard links where it can (the same file system): staged only to be hashed and copied again.
    cp -a --link "$PYTHON_TORCH_DIR/." "$2${PYTHON_TORCH_AT[$1]}/" 2>/dev/null || cp -a "$PYTHON_TORCH_DIR/." "$2${PYTHON_TORCH_AT[$1]}/"
    rm "$2${PYTHON_TORCH_AT[$1]}/.complete"  # the cache's stamp, not part of the tree
  fi
}

# config_inputs NAME: everything about NAME's image that is not a file.
config_inputs() {
  printf 'ref=%s user=%s entrypoint=%s add_user=%s env=%s private=%s check=%s\n' "$(ref "$1")" "${USER_SPEC[$1]}" \
    "${ENTRYPOINT[$1]}" "${ADD_USER[$1]}" "$IMAGE_PATH_ENV" "$PRIVATE_LIB_DIR" "${CHECK[$1]}"
}

# cached_image NAME KEY START: links the build tree to NAME's image of KEY and says so when it
# is built already (status 0); else removes the link until the new one is complete (status 1).
cached_image() {
  local name=$1 key=$2 start=$3 entry="$IMAGES/image/$1-$2"
  mkdir -p "$BUILD_DIR/images"
  if [[ -f $entry/image.tar ]]; then
    ln -sfn "$entry" "$BUILD_DIR/images/$name"
    log "$(ref "$name"): up to date ($key, checked in $((SECONDS - start)) s)"
    return 0
  fi
  rm -f "$BUILD_DIR/images/$name"  # no link rather than a stale one
  return 1
}

# publish_image NAME KEY TMP UNPACKED_BYTES START: TMP's archive (and packages.txt, which the
# caller wrote) becomes NAME's image of KEY, with its image.env, and the build tree's link.
publish_image() {
  local name=$1 key=$2 tmp=$3 unpacked=$4 start=$5 entry="$IMAGES/image/$1-$2" compressed
  compressed=$(du -sb "$tmp/oci/blobs" | cut -f1)
  rm -f "$tmp"/*.log
  { echo "ref=$(ref "$name")"; echo "key=$key"; echo "built_seconds=$((SECONDS - start))"
    echo "compressed_bytes=$compressed"; echo "unpacked_bytes=$unpacked"; echo "archive_bytes=$(stat -c %s "$tmp/image.tar")"
  } > "$tmp/image.env"
  mkdir -p "$IMAGES/image"
  mv "$tmp" "$entry"
  ln -sfn "$entry" "$BUILD_DIR/images/$name"
  log "$(ref "$name"): built in $((SECONDS - start)) s: $((compressed / 1000000)) MB compressed, $((unpacked / 1000000)) MB unpacked; $entry/image.tar"
  prune "$name"
}

# build_scratch_image NAME: an image of NAME's install tree alone, on no base (the agent's: its
# bundle carries its own loader and libraries). Checked before it is packed: the bundle's
# launcher runs in that root, as the image's user, with nothing else in it.
build_scratch_image() {
  local name=$1 start=$SECONDS install key
  new_tmp install "install-$name"
  stage_install "$name" "$install"
  key=$(printf '%s\n' "scratch" "$(config_inputs "$name")" "$(sha256sum < "$0")" "$(tree_manifest "$install")" | sha)
  cached_image "$name" "$key" "$start" && return
  log "$(ref "$name"): building $key (FROM scratch)"
  local out
  out=$(chroot --userspec="${USER_SPEC[$name]}" "$install" /lockstep/lockstep-agent --version 2>&1) ||
    die "in $(ref "$name"), /lockstep/lockstep-agent does not run on its own as ${USER_SPEC[$name]}: $out"
  local tmp
  new_tmp tmp "image-$name-$key"
  umoci init --layout "$tmp/oci"
  umoci new --image "$tmp/oci:$VERSION"
  step "packing the bundle layer" "$tmp/umoci.log" nice umoci insert --image "$tmp/oci:$VERSION" \
    --history.created_by "cmake --install --component {${COMPONENTS[$name]// /,}} --prefix ${PREFIX[$name]}" "$install" /
  umoci config --image "$tmp/oci:$VERSION" --no-history --config.user "${USER_SPEC[$name]}" \
    --config.label "org.opencontainers.image.version=$VERSION" --config.label "dev.lockstep.inputs=$key"
  umoci gc --layout "$tmp/oci"
  step "writing the archive" "$tmp/skopeo.log" nice skopeo copy --quiet "oci:$tmp/oci:$VERSION" "docker-archive:$tmp/image.tar:$(ref "$name")"
  : > "$tmp/packages.txt"  # no Debian package in it
  publish_image "$name" "$key" "$tmp" "$(du -sb "$install" | cut -f1)" "$start"
}

build_image() {
  local name=$1 start=$SECONDS install key
  [[ -z ${COMPONENTS[$name]} || -d $BUILD_DIR ]] || die "no build tree at $BUILD_DIR; run scripts/build.sh first"
  if [[ $SCRATCH_IMAGES == *" $name "* ]]; then build_scratch_image "$name"; return; fi
  new_tmp install "install-$name"
  stage_install "$name" "$install"
  ensure_base "$name"
  ensure_libs "$name" "$install"
  key=$(printf '%s\n' "$(basename "$PARENT")" "$(config_inputs "$name")" "$(sha256sum < "$0")" "$(tree_manifest "$install")" | sha)
  cached_image "$name" "$key" "$start" && return
  log "$(ref "$name"): building $key"
  local tmp rootfs
  new_tmp tmp "image-$name-$key"
  rootfs="$tmp/bundle/rootfs"
  copy_layout "$PARENT/oci" "$tmp/oci"
  step "unpacking the layers below" "$tmp/umoci.log" umoci unpack --image "$tmp/oci:$PARENT_TAG" "$tmp/bundle"
  cp -a "$install/." "$rootfs/"
  if [[ -n ${ADD_USER[$name]} ]]; then
    # shellcheck disable=SC2086
    chroot "$rootfs" ${ADD_USER[$name]}
  fi
  chroot "$rootfs" /sbin/ldconfig
  # Every shared library of every binary must be found inside the image.
  local b unresolved=""
  for b in "$install"/usr/local/bin/*; do
    [[ -e $b ]] || continue
    unresolved+=$(chroot "$rootfs" /usr/bin/ldd "/usr/local/bin/$(basename "$b")" | grep 'not found' || true)
  done
  [[ -z $unresolved ]] || die "in $(ref "$name"), not found: $unresolved; add the Debian package that has it to IMAGE_${name^^}_PACKAGES in scripts/versions.env"
  if [[ -n ${CHECK[$name]} ]]; then  # as the image's user, with only the image's environment
    local user=${USER_SPEC[$name]}
    [[ $user == *:* ]] || user="$user:$user"
    chroot --userspec="$user" "$rootfs" /usr/bin/env -i "$IMAGE_PATH_ENV" /bin/sh -c "${CHECK[$name]}" > "$tmp/check.log" 2>&1 ||
      { cat "$tmp/check.log" >&2; die "in $(ref "$name"), \`${CHECK[$name]}\` failed (above)"; }
  fi
  local created_by="${ADD_USER[$name]:+${ADD_USER[$name]}; }ldconfig"
  [[ -n ${COMPONENTS[$name]} ]] && created_by="cmake --install --component {${COMPONENTS[$name]// /,}} --prefix /usr/local; $created_by"
  [[ -n ${PYTHON_TORCH_AT[$name]} ]] && created_by="scripts/python-torch.sh's tree into ${PYTHON_TORCH_AT[$name]}; $created_by"
  step "packing the install layer" "$tmp/umoci.log" nice umoci repack --image "$tmp/oci:$VERSION" \
    --history.created_by "$created_by" "$tmp/bundle"
  local config=(--config.user "${USER_SPEC[$name]}" --config.env "$IMAGE_PATH_ENV"
                --config.label "org.opencontainers.image.version=$VERSION" --config.label "dev.lockstep.inputs=$key")
  [[ -n ${ENTRYPOINT[$name]} ]] && config+=(--config.entrypoint "${ENTRYPOINT[$name]}")
  umoci config --image "$tmp/oci:$VERSION" --no-history "${config[@]}"
  umoci rm --image "$tmp/oci:$PARENT_TAG"
  umoci gc --layout "$tmp/oci"
  step "writing the archive" "$tmp/skopeo.log" nice skopeo copy --quiet "oci:$tmp/oci:$VERSION" "docker-archive:$tmp/image.tar:$(ref "$name")"
  local unpacked
  unpacked=$(du -sb "$rootfs" | cut -f1)
  remove_tree "$tmp/bundle"
  cp "$BASE/packages.txt" "$tmp/packages.txt"
  publish_image "$name" "$key" "$tmp" "$unpacked" "$start"
}

# prune NAME: keeps the three newest images of NAME (other checkouts may use older ones), and
# the four newest bases and library layers (two images' worth).
prune() {
  local old
  # shellcheck disable=SC2012
  for old in $(ls -dt "$IMAGES/image/$1-"* 2>/dev/null | tail -n +4) $(ls -dt "$IMAGES/base/"* 2>/dev/null | tail -n +5) \
             $(ls -dt "$IMAGES/libs/"* 2>/dev/null | tail -n +5); do
    log "removing the old $(basename "$(dirname "$old")") $(basename "$old")"; remove_tree "$old"
  done
}

# entry_of NAME: the image the build tree's link names, which must be built.
entry_of() {
  local link="$BUILD_DIR/images/$1"
  [[ -f $link/image.tar ]] || die "$(ref "$1") is not built for $BUILD_DIR; run scripts/images.sh build $1"
  readlink -f "$link"
}

import_image() {
  local name=$1 entry addr key full
  entry=$(entry_of "$name")
  addr=${CONTAINERD_ADDRESS:-${LOCKSTEP_CONTAINERD_ADDRESS:-/run/containerd/containerd.sock}}
  command -v ctr >/dev/null || die "ctr not found; it comes with containerd (Debian package containerd)"
  [[ -S $addr ]] || die "no containerd socket at $addr; set LOCKSTEP_CONTAINERD_ADDRESS or --address"
  key=$(sed -n 's/^key=//p' "$entry/image.env")
  full="docker.io/$(ref "$name")"  # how containerd names lockstep/NAME:VERSION
  local ctr=(ctr --address "$addr" --namespace k8s.io)
  if "${ctr[@]}" images ls "name==$full" 2>/dev/null | grep -q "dev.lockstep.inputs=$key"; then
    log "$full: already in containerd at $addr"; return
  fi
  local args=() start=$SECONDS
  [[ -n ${LOCKSTEP_CONTAINERD_SNAPSHOTTER:-} ]] && args+=(--snapshotter "$LOCKSTEP_CONTAINERD_SNAPSHOTTER")
  log "$full: importing into containerd at $addr (namespace k8s.io)"
  "${ctr[@]}" images import "${args[@]}" "$entry/image.tar" > /dev/null
  "${ctr[@]}" images label "$full" "dev.lockstep.inputs=$key" > /dev/null
  log "$full: imported in $((SECONDS - start)) s"
}

names() {
  case ${1:-all} in
    all) echo operator trainer agent pytorch ;;
    operator|trainer|agent|pytorch) echo "$1" ;;
    *) usage ;;
  esac
}

# lock_images: the tools checked, then this run alone in $IMAGES (waiting for another build).
lock_images() {
  need_tools
  mkdir -p "$IMAGES/tmp"
  exec 9> "$IMAGES/.lock"
  flock -n 9 || { log "another images.sh is building; waiting for it"; flock 9; }
  # Under the lock nothing else works in tmp: whatever is there was left by a killed build.
  find "$IMAGES/tmp" -mindepth 1 -maxdepth 1 -print0 | while IFS= read -r -d '' d; do remove_tree "$d"; done
}

cmd=${1:-}; shift || true
CONTAINERD_ADDRESS=""
if [[ ${1:-} == --address ]]; then CONTAINERD_ADDRESS=${2:-}; shift 2 || usage; fi
case $cmd in
  build)
    lock_images
    start=$SECONDS
    for n in $(names "${1:-all}"); do build_image "$n"; done
    log "images: done in $((SECONDS - start)) s"
    ;;
  bases)
    # The Debian bases alone (debootstrap: mostly downloads and unpacking), which need no build
    # tree: scripts/test.sh makes them while the C++ build runs, so `build` finds them cached.
    lock_images
    for n in $(names "${1:-all}"); do [[ $SCRATCH_IMAGES == *" $n "* ]] || ensure_base "$n"; done
    ;;
  import) for n in $(names "${1:-all}"); do import_image "$n"; done ;;
  path) [[ ${1:-} =~ ^(operator|trainer|agent|pytorch)$ ]] || usage; echo "$(entry_of "$1")/image.tar" ;;
  clean) need_tools; remove_tree "$IMAGES"; log "removed $IMAGES" ;;
  *) usage ;;
esac
