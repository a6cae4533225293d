#!/usr/bin/env bash
# A CPU-only Python PyTorch from the pinned PyPI torch wheel, as a directory for PYTHONPATH:
#   scripts/python-torch.sh      makes $PYTHON_TORCH_DIR ($CACHE/python-torch-<version>-cpu), or says it is cached
# It is a site-packages layout: torch/ (with functorch/, torchgen/ and the dist-info) and the pure-Python
# packages torch imports (scripts/versions.env). Used by host tests that run Python DDP scripts with
# the host's python3 (scripts/test.sh exports LOCKSTEP_PYTHON_TORCH) and by scripts/images.sh's
# `pytorch` test image. It needs python3 3.11: the wheel is cp311.
#
# PyPI's torch wheel is a CUDA build: torch/_C.so needs libtorch_python.so, which needs
# libtorch_cuda.so (456 MB), libc10_cuda.so, libcudnn.so.9 and libcufile.so.0 (and these in turn
# every NVIDIA library). This tree carries the Python files and the CPU libraries only (as
# scripts/setup.sh does for LibTorch: libc10, libtorch, libtorch_cpu, libtorch_python,
# libtorch_global_deps, libshm, libgomp, and the pinned libcudart and libcupti that libtorch_cpu
# needs), and for each library that a carried one needs but that is not carried, a stub with its
# name and soname, generated here from what the carried libraries import: it defines exactly the
# symbols they need that no carried or system library defines (with the version the reference asks
# for); its functions return 0 and its data is zero-filled, at the size the wheel's real library
# gives. Nothing registers CUDA, so torch runs as a CPU build: torch.cuda.is_available() is False.
# Also left out: torch/include, torch/share (building extensions against torch) and the CUDA tools in
# torch/bin. The big libraries are stripped of their static symbol tables (.symtab: 100 MB); the
# dynamic ones stay. Every .py is compiled to .pyc, as pip does when it installs, so nothing is
# written into the tree when it is used and imports are fast for a user who cannot write there.
#
# Cached by content: the directory's .complete holds a key made of every pin it is made from,
# this script and its Python steps (scripts/python_torch: the stubs, the RECORDs, the check); a
# different key rebuilds it. It is made in a temporary directory under $CACHE and
# renamed into place when complete (and `import torch` passed from it), so Ctrl-C leaves no
# half-made tree.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# --- refusals ------------------------------------------------------------------------------------
command -v python3 >/dev/null || die "python3 not found; the torch wheel $TORCH_WHEEL needs a CPython 3.11 (Debian 12's python3)"
pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ $pyver == 3.11 ]] ||
  die "python3 ($(command -v python3)) is Python $pyver, but the pinned torch wheel $TORCH_WHEEL is built for CPython 3.11 only (cp311); put a Python 3.11 first on PATH (Debian 12's python3 is 3.11)"
[[ $(uname -m) == x86_64 ]] || die "the pinned torch wheel $TORCH_WHEEL is for x86_64, not $(uname -m)"
missing=()
for t in unzip gcc readelf strip ldconfig; do command -v "$t" >/dev/null || missing+=("$t"); done
((${#missing[@]} == 0)) || die "${missing[*]} not found; install the Debian packages unzip and build-essential (scripts/setup.sh does)"

# --- the key: every input --------------------------------------------------------------------------
# The wheels: the pinned name, sha256-checked download.
WHEELS=(
  "torch==$TORCH_VERSION $TORCH_WHEEL $TORCH_WHEEL_SHA256"
  "nvidia-cuda-runtime==$CUDART_VERSION $CUDART_WHEEL $CUDART_WHEEL_SHA256"
  "nvidia-cuda-cupti==$CUPTI_VERSION $CUPTI_WHEEL $CUPTI_WHEEL_SHA256"
  "typing_extensions==$TYPING_EXTENSIONS_VERSION $TYPING_EXTENSIONS_WHEEL $TYPING_EXTENSIONS_WHEEL_SHA256"
  "sympy==$SYMPY_VERSION $SYMPY_WHEEL $SYMPY_WHEEL_SHA256"
  "mpmath==$MPMATH_VERSION $MPMATH_WHEEL $MPMATH_WHEEL_SHA256"
)
# The CPU libraries of torch/lib that are carried (the rest of torch/lib is CUDA's).
CPU_LIBS=(libc10.so libtorch.so libtorch_cpu.so libtorch_python.so libtorch_global_deps.so libshm.so 'libgomp.so*')
# The Python steps: stubs and RECORDs (helper.py and its modules), the new tree's check (check.py).
py="$ROOT/scripts/python_torch"
PY_FILES=(helper.py elf.py stubs.py records.py check.py)
key=$( { printf '%s\n' "${WHEELS[@]}"; sha256sum < "${BASH_SOURCE[0]}"; cat "${PY_FILES[@]/#/$py/}" | sha256sum; } | sha256sum | cut -c1-16)
cached() { [[ $(cat "$PYTHON_TORCH_DIR/.complete" 2>/dev/null) == "$key" ]]; }
if cached; then log "Python torch $TORCH_VERSION (CPU): cached in $PYTHON_TORCH_DIR"; exit 0; fi

mkdir -p "$CACHE/downloads"
exec 9> "$CACHE/.python-torch.lock"
flock -n 9 || { log "another scripts/python-torch.sh is making it; waiting"; flock 9; }
if cached; then log "Python torch $TORCH_VERSION (CPU): made by the other run, in $PYTHON_TORCH_DIR"; exit 0; fi

scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT
trap 'echo; log "interrupted; $PYTHON_TORCH_DIR is as it was (the next run starts again)"; exit 130' INT TERM
start=$SECONDS
for w in "${WHEELS[@]}"; do
  read -r req file sha <<< "$w"
  fetch_wheel "$req" "$file" "$sha"
done

work=""  # scratch_dir sets it
scratch_dir work
tree="$work/tree"
mkdir -m 0755 "$tree"
log "Python torch $TORCH_VERSION (CPU): making $PYTHON_TORCH_DIR (one to three minutes on 2 cores, once)"
unpack() {
  local wheel="$CACHE/downloads/$TORCH_WHEEL"
  nice unzip -q "$wheel" -x 'torch/lib/*' 'torch/include/*' 'torch/share/*' 'torch/bin/*' -d "$tree"
  nice unzip -q "$wheel" "${CPU_LIBS[@]/#/torch/lib/}" torch/bin/torch_shm_manager -d "$tree"
  unzip -q -j "$CACHE/downloads/$CUDART_WHEEL" 'nvidia/cu13/lib/libcudart.so.13' -d "$tree/torch/lib"
  unzip -q -j "$CACHE/downloads/$CUPTI_WHEEL" 'nvidia/cu13/lib/libcupti.so.13' -d "$tree/torch/lib"
  local f
  for f in "$TYPING_EXTENSIONS_WHEEL" "$SYMPY_WHEEL" "$MPMATH_WHEEL"; do unzip -q "$CACHE/downloads/$f" -d "$tree"; done
  rm -rf "$tree"/*.data  # a wheel's scripts and manuals (sympy's isympy), not part of the package
}
run_with_heartbeat "unpacking" unpack
log "  unpacked the Python files and CPU libraries: $(du -sm "$tree" | cut -f1) MB"

# Strip the static symbol tables where that makes a file smaller (the dynamic ones stay).
strip_libs() {
  local f before after
  for f in "$tree"/torch/lib/*.so* "$tree"/torch/_C*.so; do
    [[ $(readelf -S -W "$f") == *" .symtab "* ]] || continue
    before=$(stat -c %s "$f")
    nice strip --strip-all -o "$f.stripped" "$f"
    after=$(stat -c %s "$f.stripped")
    if ((after < before)); then chmod --reference="$f" "$f.stripped"; mv "$f.stripped" "$f"; else rm "$f.stripped"; fi
  done
}
before=$(du -sm "$tree" | cut -f1)
run_with_heartbeat "stripping" strip_libs
log "  stripped the libraries: $before MB -> $(du -sm "$tree" | cut -f1) MB"

log "  stubs for the libraries that are not carried"
run_with_heartbeat "making the stubs" python3 -B "$py/helper.py" stubs "$tree" "$CACHE/downloads/$TORCH_WHEEL" "$work"

log "  compiling every .py to .pyc (as pip install does)"
# pip's way too: a file that does not compile (there are none in these pins) is left to be compiled when imported.
run_with_heartbeat "compiling" nice python3 -m compileall -q -j 2 "$tree" > "$work/compileall.log" ||
  log "  compileall: $(grep -c '^\*\*\*' "$work/compileall.log" || true) file(s) did not compile; they stay source only"
python3 -B "$py/helper.py" records "$tree"

# It must import from where it is, with nothing else on the path (-S), as a CPU build, and train.
# (-c: the path holds the tree, not check.py's folder with the helper's modules.)
log "  checking: import torch, a CPU autograd step, torch.distributed and DDP import"
run_with_heartbeat "import torch" env PYTHONPATH="$tree" PYTHONDONTWRITEBYTECODE=1 \
  python3 -S -W ignore::UserWarning -c "$(< "$py/check.py")" "$TORCH_VERSION" || die "the new tree fails the check above; $PYTHON_TORCH_DIR is as it was"

echo "$key" > "$tree/.complete"
rm -rf "$PYTHON_TORCH_DIR"
mv "$tree" "$PYTHON_TORCH_DIR"
log "Python torch $TORCH_VERSION (CPU): ready in $PYTHON_TORCH_DIR ($(du -sm "$PYTHON_TORCH_DIR" | cut -f1) MB) in $((SECONDS - start)) s"
