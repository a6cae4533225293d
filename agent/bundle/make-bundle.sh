#!/usr/bin/env bash
# Makes the agent's bundle (docs/agent.md, "The bundle"); the lockstep-agent-bundle target runs it.
#   make-bundle.sh OUT AGENT LAUNCHER [PYTHON_DIR [NCCL_PLUGIN]]
#
#   OUT/lockstep-agent          LAUNCHER, statically linked: starts the agent through OUT/lib's loader
#   OUT/libexec/lockstep-agent  AGENT, as built
#   OUT/lib/                    AGENT's loader and every library it needs, transitively, as this
#                               machine's loader resolves them (ldd), under their sonames; and the
#                               rest of the glibc they come from, for what the agent loads at run
#                               time: NVML needs libpthread.so.0, libdl.so.2 and librt.so.1, which
#                               the image's older glibc must not provide
#   OUT/python/                 PYTHON_DIR's files (no __pycache__), when that directory exists
#   OUT/nccl/libnccl-profiler-lockstep.so
#                               NCCL_PLUGIN, the NCCL profiler plugin the agent gives its workers
#                               (the launcher names it in LOCKSTEP_NCCL_PROFILER): loaded by the
#                               image's own loader into the workers, so it must need nothing of
#                               glibc newer than 2.17, which is checked here
#
# Made beside OUT and renamed into place when complete and checked: the bundle's loader,
# started as the launcher starts it, must find every library in OUT/lib, and the bundle must run.
set -euo pipefail

die() { printf 'make-bundle.sh: %s\n' "$*" >&2; exit 1; }
(($# >= 3 && $# <= 5)) || die "usage: make-bundle.sh OUT AGENT LAUNCHER [PYTHON_DIR [NCCL_PLUGIN]]"
out=$1 agent=$2 launcher=$3 python=${4:-} plugin=${5:-}
[[ -x $agent && -x $launcher ]] || die "$agent and $launcher must be built first"
command -v ldd >/dev/null || die "ldd not found (it comes with glibc's development tools, Debian package libc-bin)"

tmp="$out.tmp-$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp/lib" "$tmp/libexec"

# needed FILE...: "soname path" of every library the FILEs load, transitively, as ldd resolves them.
needed() {
  local f report
  for f in "$@"; do
    report=$(ldd "$f") || die "ldd $f failed: $report"
    if grep -q 'not found' <<< "$report"; then die "$f needs libraries this machine lacks: $(grep 'not found' <<< "$report" | tr -s ' \t' ' ')"; fi
    awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' <<< "$report"
  done | LC_ALL=C sort -u
}

libs=$(needed "$agent")
loader=$(ldd "$agent" | awk '$1 ~ /^\// && $2 ~ /^\(0x/ {print $1; exit}')
[[ -n $loader ]] || die "cannot find $agent's dynamic loader in ldd's report"
[[ $(basename "$loader") == ld-linux-x86-64.so.2 ]] || die "the loader is $loader; the launcher starts lib/ld-linux-x86-64.so.2 (x86-64 glibc only)"
libc=$(awk '$1 == "libc.so.6" {print $2}' <<< "$libs")
[[ -n $libc ]] || die "$agent does not link glibc's libc.so.6"

# glibc_libraries: the shared libraries of the package that installed libc.so.6 (dpkg or rpm),
# as files beside it.
glibc_libraries() {
  local dir pkg="" p names
  dir=$(dirname "$libc")
  if command -v dpkg-query >/dev/null; then
    for p in "$libc" "$(readlink -f "$libc")" "${libc#/usr}" "/usr$libc"; do
      pkg=$(dpkg-query -S "$p" 2>/dev/null | head -n1 | sed 's/: .*//') && [[ -n $pkg ]] && break
    done
    [[ -n $pkg ]] && names=$(dpkg-query -L "$pkg")
  elif command -v rpm >/dev/null; then
    pkg=$(rpm -qf --qf '%{NAME}\n' "$libc" 2>/dev/null | head -n1) && names=$(rpm -ql "$pkg")
  fi
  [[ -n $pkg && -n ${names:-} ]] || die "cannot tell which package installed $libc (neither dpkg nor rpm knows it)"
  xargs -r -n1 basename <<< "$names" | grep -E '^(ld-linux[^/]*\.so\.[0-9]+|lib[^/]*\.so\.[0-9.]+)$' | LC_ALL=C sort -u |
    while read -r p; do [[ -f $dir/$p ]] && echo "$dir/$p"; done
}
glibc=$(glibc_libraries)
grep -q '/libpthread\.so\.0$' <<< "$glibc" || die "found no libpthread.so.0 among glibc's libraries beside $libc: $glibc"

# Every library under its soname; the glibc ones and what they need (only glibc) too.
mapfile -t glibc_libs < <(grep -v '/ld-linux[^/]*$' <<< "$glibc")
all=$( { echo "$libs"; while read -r p; do echo "$(basename "$p") $p"; done <<< "$glibc"; needed "${glibc_libs[@]}"; } | LC_ALL=C sort -u -k1,1)
while read -r soname path; do
  [[ $soname == ld-linux-x86-64.so.2 ]] && continue
  cp -L "$path" "$tmp/lib/$soname"
  chmod 0644 "$tmp/lib/$soname"
done <<< "$all"
cp -L "$loader" "$tmp/lib/ld-linux-x86-64.so.2"
chmod 0755 "$tmp/lib/ld-linux-x86-64.so.2"
cp "$agent" "$tmp/libexec/lockstep-agent"
cp "$launcher" "$tmp/lockstep-agent"
chmod 0755 "$tmp/libexec/lockstep-agent" "$tmp/lockstep-agent"
if [[ -n $python && -d $python ]]; then
  mkdir -p "$tmp/python"
  cp -R "$python/." "$tmp/python/"
  find "$tmp/python" \( -name __pycache__ -o -name '*.pyc' \) -prune -exec rm -rf {} +
fi
if [[ -n $plugin ]]; then
  [[ -f $plugin ]] || die "the NCCL profiler plugin $plugin is not built"
  command -v objdump >/dev/null || die "objdump not found (binutils) to check the NCCL profiler plugin's glibc versions"
  newest=$(objdump -T "$plugin" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n1)
  [[ -n $newest && $(printf '%s\n2.17\n' "$newest" | sort -V | tail -n1) == 2.17 ]] ||
    die "$plugin needs glibc $newest; the workers' images may have 2.17 (objdump -T shows which symbol)"
  mkdir -p "$tmp/nccl"
  cp "$plugin" "$tmp/nccl/libnccl-profiler-lockstep.so"
  chmod 0644 "$tmp/nccl/libnccl-profiler-lockstep.so"
fi

# The checks: started as the launcher starts it, the loader takes every library from lib/.
for f in "$tmp/libexec/lockstep-agent" "$tmp"/lib/*.so*; do
  [[ $f == */ld-linux-x86-64.so.2 ]] && continue
  report=$("$tmp/lib/ld-linux-x86-64.so.2" --inhibit-cache --library-path "$tmp/lib" --list "$f" 2>&1) ||
    die "the bundle's loader cannot load $(basename "$f"): $report"
  # (The loader's own line names it by the agent's PT_INTERP, but it is the one that ran.)
  outside=$(awk '$2 == "=>" {print $1, "=>", $3}' <<< "$report" | grep -v " => $tmp/lib/" || true)
  [[ -z $outside ]] || die "$(basename "$f") loads from outside the bundle: $outside"
done
version=$("$tmp/lockstep-agent" --version 2>&1) || die "the bundle does not run: $version"
[[ $version == lockstep-agent* ]] || die "the bundle's --version said: $version"

rm -rf "$out.old"
[[ -e $out ]] && mv "$out" "$out.old"
mv "$tmp" "$out"
rm -rf "$out.old"
echo "agent bundle: $out, $(ls "$out/lib" | wc -l) files in lib/, $(du -sh "$out" | cut -f1)"
