#!/usr/bin/env bash
# A root file system whose glibc is older than the one Lockstep builds with: Debian bullseye
# (glibc 2.31) against bookworm's 2.36. bundle_test runs the agent's bundle in it, as in a
# user's image of an older distribution (docs/development.md, "The old-glibc root").
#   scripts/old-glibc-root.sh         make it unless cached; its path is the only line on stdout
#   scripts/old-glibc-root.sh clean   remove every cached root
#
# `debootstrap --variant=minbase bullseye` from the machine's Debian mirror: LOCKSTEP_DEBIAN_MIRROR,
# else the mirror apt is configured with for bookworm (the same mirror serves bullseye). Cached
# under $CACHE/old-glibc-root/<key>/rootfs, where the key covers the suite, variant,
# architecture, mirror and recipe; made in $CACHE/old-glibc-root/tmp and renamed into place
# when complete, so Ctrl-C leaves no half-made root. Progress goes to stderr. Needs root.
# Tests must not write into the cached root (bundle_test mounts an overlay on it).
set -euo pipefail
source "$(dirname "$0")/common.sh"

SUITE=bullseye
FORMAT=1  # bump when the recipe below changes in a way the key does not see
DIR="$CACHE/old-glibc-root"
ARCH=$(dpkg --print-architecture)

say() { log "$@" >&2; }

# mirror: LOCKSTEP_DEBIAN_MIRROR, else the first URI apt uses for bookworm (one-line .list
# or deb822 .sources); scripts/images.sh finds its mirror the same way.
mirror() {
  if [[ -n ${LOCKSTEP_DEBIAN_MIRROR:-} ]]; then echo "${LOCKSTEP_DEBIAN_MIRROR%/}"; return; fi
  local f files=() m=""
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [[ -f $f ]] && files+=("$f")
  done
  ((${#files[@]})) && m=$(awk '
    FNR == 1 { types = uris = suites = "" }
    FILENAME ~ /\.list$/ && $1 == "deb" {
      i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
      if ($(i + 1) == "bookworm") { print $i; exit }
    }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^[ \t]*$/) { types = uris = suites = "" }
      else if ($1 == "Types:") types = " " $0 " "
      else if ($1 == "URIs:") uris = $2
      else if ($1 == "Suites:") suites = " " $0 " "
      if (types ~ / deb / && uris != "" && suites ~ / bookworm /) { print uris; exit }
    }' "${files[@]}")
  [[ -n $m ]] || die "no apt source for Debian bookworm in /etc/apt/sources.list*; set LOCKSTEP_DEBIAN_MIRROR (e.g. http://deb.debian.org/debian)"
  echo "${m%/}"
}

# remove_tree DIR: unmounts what a killed debootstrap may have left mounted in DIR (proc, sys),
# then removes DIR without crossing into another file system.
remove_tree() {
  [[ -e $1 ]] || return 0
  local m
  while read -r m; do umount -l "$m" 2>/dev/null || true; done < <(awk -v d="$1/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r)
  rm -rf --one-file-system "$1"
}

TMP=""
CHILD=""
cleanup() { [[ -z $TMP ]] || remove_tree "$TMP"; }
on_signal() {
  trap - INT TERM
  if [[ -n $CHILD ]]; then kill -TERM -- "-$CHILD" 2>/dev/null || true; wait "$CHILD" 2>/dev/null || true; fi
  say "interrupted; removing the unfinished root (cached roots are untouched)"
  cleanup
  trap - EXIT
  kill -s "$1" $$
}

case ${1:-} in
  "") ;;
  clean) remove_tree "$DIR"; say "removed $DIR"; exit 0 ;;
  *) die "usage: scripts/old-glibc-root.sh [clean]" ;;
esac

MIRROR=$(mirror)
inputs="format=$FORMAT suite=$SUITE variant=minbase arch=$ARCH mirror=$MIRROR"
KEY=$(sha256sum <<< "$inputs" | cut -c1-16)
ENTRY="$DIR/$KEY"
if [[ -f $ENTRY/info.env ]]; then
  say "old-glibc root $KEY: cached ($(sed -n 's/^glibc=//p' "$ENTRY/info.env") from $SUITE)"
  echo "$ENTRY/rootfs"
  exit 0
fi
[[ $(id -u) -eq 0 ]] || die "making the old-glibc root needs root (debootstrap); bundle_test needs root too"
command -v debootstrap >/dev/null || die "debootstrap not found; scripts/setup.sh installs it (Debian package debootstrap)"
mkdir -p "$DIR/tmp"
exec 9> "$DIR/.lock"
flock -n 9 || { say "another old-glibc-root.sh is making the root; waiting for it"; flock 9; }
if [[ -f $ENTRY/info.env ]]; then echo "$ENTRY/rootfs"; exit 0; fi  # made while we waited
# Under the lock nothing else works in tmp: whatever is there was left by a killed run.
find "$DIR/tmp" -mindepth 1 -maxdepth 1 -print0 | while IFS= read -r -d '' d; do remove_tree "$d"; done

trap cleanup EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
TMP=$(mktemp -d "$DIR/tmp/$KEY.XXXXXX")
chmod 0755 "$TMP"
start=$SECONDS
say "old-glibc root $KEY: debootstrap --variant=minbase $SUITE from $MIRROR (once; a minute or two)"
mkdir -p "$DIR/debs"
setsid nice debootstrap --variant=minbase --arch="$ARCH" --cache-dir="$DIR/debs" "$SUITE" "$TMP/rootfs" "$MIRROR" \
  > "$TMP/debootstrap.log" 2>&1 &
CHILD=$!
while kill -0 "$CHILD" 2>/dev/null; do
  for _ in $(seq 15); do sleep 1; kill -0 "$CHILD" 2>/dev/null || break; done
  kill -0 "$CHILD" 2>/dev/null && say "  debootstrap: $((SECONDS - start)) s, $(tail -n1 "$TMP/debootstrap.log" | cut -c1-90)"
done
rc=0; wait "$CHILD" || rc=$?
CHILD=""
if ((rc)); then
  tail -n 20 "$TMP/debootstrap.log" >&2
  die "debootstrap of $SUITE from $MIRROR failed (exit $rc); set LOCKSTEP_DEBIAN_MIRROR to a mirror that serves $SUITE"
fi
r="$TMP/rootfs"
rm -rf "$r/var/lib/apt/lists/"* "$r/var/cache/apt/"*.bin "$r/var/cache/apt/archives/"*.deb "$r/var/log/"*
glibc=$(chroot "$r" /usr/bin/ldd --version | sed -n '1s/.* \([0-9][0-9.]*\)$/\1/p')
[[ -n $glibc ]] || die "cannot tell the glibc version of the new $SUITE root"
{ echo "$inputs"; echo "glibc=$glibc"; echo "seconds=$((SECONDS - start))"; echo "bytes=$(du -sb "$r" | cut -f1)"; } > "$TMP/info.env"
rm -f "$TMP/debootstrap.log"
mv "$TMP" "$ENTRY"
TMP=""
say "old-glibc root $KEY: glibc $glibc, $(du -sh "$ENTRY/rootfs" | cut -f1), made in $((SECONDS - start)) s: $ENTRY/rootfs"
echo "$ENTRY/rootfs"
