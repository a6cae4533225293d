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
# Cached by content: the directory's .complete holds a key made of every pin it is made from and
# this script; a different key rebuilds it. It is made in a temporary directory under $CACHE and
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
key=$( { printf '%s\n' "${WHEELS[@]}"; sha256sum < "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-16)
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

# The helper: stub generation and the dist-info RECORDs (Python, run by the host's python3).
cat > "$work/helper.py" <<'PY'
import base64, hashlib, os, re, struct, subprocess, sys, zipfile

# The manylinux system libraries: a Linux that runs manylinux wheels has them; never stubbed.
SYSTEM = ["libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libutil.so.1",
          "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1"]


def fail(msg):
    sys.exit("[lockstep] error: python-torch: " + msg)


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=True).stdout


_syms = {}


def dynsyms(path):
    """PATH's dynamic symbols: name, version (None when unversioned), type, binding, size, value, defined."""
    if path not in _syms:
        out = []
        for line in readelf("--dyn-syms", path).splitlines():
            f = line.split()
            if len(f) < 8 or not re.fullmatch(r"[1-9]\d*:", f[0]):
                continue
            name, _, ver = f[7].partition("@")
            out.append(dict(name=name, ver=ver.lstrip("@") or None, type=f[3], bind=f[4], size=int(f[2], 0),
                            value=int(f[1], 16), defined=f[6] != "UND"))
        _syms[path] = out
    return _syms[path]


_defs = {}


def defined(path):
    if path not in _defs:
        _defs[path] = {s["name"]: s for s in dynsyms(path) if s["defined"]}
    return _defs[path]


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", readelf("-d", path))


def verneed_files(path):
    """{version name: the file PATH's version-needs section asks it of}"""
    out, cur = {}, None
    for line in readelf("-V", path).splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            cur = m.group(1)
        m = re.search(r"Name: (\S+)", line)
        if m and cur:
            out[m.group(1)] = cur
    return out


def system_path(soname):
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"^\s+" + re.escape(soname) + r" \((?:libc6,)?x86-64[^)]*\) => (\S+)$", out, re.M)
    if not m:
        fail(f"the system library {soname} is not in ldconfig's cache")
    return m.group(1)


class Elf:
    """Just enough of an x86-64 ELF file to read code bytes and symbol sizes."""

    def __init__(self, path):
        self.f = open(path, "rb")
        h = self.f.read(64)
        if h[:4] != b"\x7fELF" or h[4] != 2 or h[5] != 1:
            fail(f"{path} is not a 64-bit little-endian ELF file")
        phoff, shoff = struct.unpack_from("<QQ", h, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", h, 0x36)
        self.f.seek(phoff)
        ph = self.f.read(phentsize * phnum)
        self.loads = [(va, off, fsz) for t, _, off, va, _, fsz, _, _ in
                      (struct.unpack_from("<IIQQQQQQ", ph, i * phentsize) for i in range(phnum)) if t == 1]
        self.f.seek(shoff)
        sh = self.f.read(shentsize * shnum)
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", sh, i * shentsize) for i in range(shnum)]
        self._sizes = None

    def read(self, addr, n):
        for va, off, fsz in self.loads:
            if va <= addr < va + fsz:
                self.f.seek(off + addr - va)
                return self.f.read(n)
        return b""

    def object_size(self, addr):
        """The size the symbol tables give the data object at ADDR, or None."""
        if self._sizes is None:
            self._sizes = {}
            for _, typ, _, _, off, size, _, _, _, entsize in self.sections:
                if typ in (2, 11) and entsize == 24:  # SHT_SYMTAB, SHT_DYNSYM
                    self.f.seek(off)
                    for _, info, _, shndx, value, sz in struct.iter_unpack("<IBBHQQ", self.f.read(size)):
                        if info & 0xF == 1 and sz and shndx:  # a defined STT_OBJECT
                            self._sizes[value] = max(sz, self._sizes.get(value, 0))
        return self._sizes.get(addr)


def static_address(elf, value):
    """The address the function at VALUE returns when all it does is `lea disp(%rip), %rax; ret`
    (it returns its own static data, e.g. a reference to a static variable), else None."""
    code = elf.read(value, 12)
    if code[:4] == b"\xf3\x0f\x1e\xfa":  # endbr64
        code, value = code[4:], value + 4
    if code[:3] == b"\x48\x8d\x05" and code[7:8] == b"\xc3":
        return value + 7 + struct.unpack_from("<i", code, 3)[0]
    return None


def stubs(tree, wheel, work):
    """Stubs in TREE/torch/lib for what the carried libraries need and the tree lacks."""
    lib = os.path.join(tree, "torch", "lib")
    carried = {}
    for root, _, files in os.walk(os.path.join(tree, "torch")):
        for name in files:
            path = os.path.join(root, name)
            if (name.endswith(".so") or ".so." in name) and not os.path.islink(path):
                with open(path, "rb") as f:
                    if f.read(4) == b"\x7fELF":
                        carried[name] = path
    provided = set()  # what a carried or system library defines
    for path in list(carried.values()) + [system_path(s) for s in SYSTEM]:
        provided |= defined(path).keys()
    users = {}  # stubbed soname -> the carried libraries that need it
    for name, path in sorted(carried.items()):
        for n in needed(path):
            if n not in carried and n not in SYSTEM:
                users.setdefault(n, []).append(name)

    # The wheel's own copies of the stubbed libraries (and the wheel libraries they need), read for
    # which library defines a symbol, how big its data is, and what its functions do.
    zf = zipfile.ZipFile(wheel)
    members = set(zf.namelist())

    def in_wheel(soname):
        m = "torch/lib/" + soname
        if soname in carried or m not in members:
            return None
        path = os.path.join(work, "wheel", m)
        if not os.path.exists(path):
            zf.extract(m, os.path.join(work, "wheel"))
        return path

    def closure(soname):
        """SONAME and the libraries it needs, transitively, that the wheel has and the tree lacks."""
        seen, todo = [], [soname]
        while todo:
            n = todo.pop(0)
            if n not in seen and in_wheel(n):
                seen.append(n)
                todo += needed(in_wheel(n))
        return seen

    want = {}  # symbol -> (stub, version, type, size, the real definition's file, the real definition)
    for name, path in sorted(carried.items()):
        deps = [n for n in needed(path) if n in users]
        vfiles = verneed_files(path)
        for s in dynsyms(path):
            sym = s["name"]
            # Weak references may stay undefined; the CPython API is the interpreter's, which loads _C.
            if s["defined"] or s["bind"] == "WEAK" or sym in provided or re.match(r"_?Py", sym):
                continue
            if s["ver"]:
                stub = vfiles.get(s["ver"])
                if stub not in users:
                    fail(f"{name} needs {sym}@{s['ver']} of {stub}, which is neither carried, a system library nor stubbed")
            else:
                # The stubbed library that defines it in the wheel, else the one whose wheel dependencies
                # do, else the one named like it (cuFileRead: libcufile.so.0), else the first it needs.
                stub = (next((d for d in deps if in_wheel(d) and sym in defined(in_wheel(d))), None)
                        or next((d for d in deps if any(sym in defined(in_wheel(c)) for c in closure(d))), None)
                        or next((d for d in deps if sym.lower().startswith(d[3:].split(".")[0].lower())), None)
                        or (deps[0] if deps else None))
                if not stub:
                    fail(f"{name} needs {sym}, which no carried or system library defines, and it needs no stubbed library")
            real_file = real = None
            for c in closure(stub):
                if sym in defined(in_wheel(c)):
                    real_file, real = in_wheel(c), defined(in_wheel(c))[sym]
                    break
            typ = real["type"] if real else ("FUNC" if s["type"] == "NOTYPE" else s["type"])
            if typ not in ("FUNC", "OBJECT"):
                fail(f"{name} needs {sym} ({typ}) of {stub}; the stubs make only functions and data objects")
            if sym in want and want[sym][:2] != (stub, s["ver"]):
                fail(f"{sym} is needed of both {want[sym][0]} and {stub}")
            want[sym] = (stub, s["ver"], typ, real["size"] if real else 0, real_file, real)

    elves = {}
    for soname in sorted(users):
        syms = sorted((sym, v) for sym, v in want.items() if v[0] == soname)
        asm = [f"# A stub of {soname} for a CPU-only torch, made by scripts/python-torch.sh."]
        for i, (sym, (_, ver, typ, size, real_file, real)) in enumerate(syms):
            if typ == "FUNC":
                target = None
                if real:
                    elf = elves.setdefault(real_file, Elf(real_file))
                    target = static_address(elf, real["value"])
                asm += ["\t.text", f"\t.globl {sym}", f"\t.type {sym}, @function", f"{sym}:"]
                if target is not None:
                    # It returns the address of its static data (a reference, which callers write
                    # through): return that of zero-filled data of the same size.
                    n = max(elf.object_size(target) or 64, 8)
                    asm += [f"\tleaq .Ldata{i}(%rip), %rax", "\tret", f"\t.size {sym}, .-{sym}",
                            "\t.bss", "\t.p2align 4", f".Ldata{i}:", f"\t.zero {n}"]
                else:  # returns 0 (integer, pointer, a pair of them, or floating point)
                    asm += ["\txorl %eax, %eax", "\txorl %edx, %edx", "\tpxor %xmm0, %xmm0", "\tret",
                            f"\t.size {sym}, .-{sym}"]
            elif sym.startswith("_ZTI"):
                # A std::type_info: zero-filled it would have no name, which pybind11 hashes and
                # compares when it registers the class; so a class_type_info naming the type.
                n = max(size, 16)
                asm += ["\t.section .data.rel.ro,\"aw\"", "\t.p2align 3", f"\t.globl {sym}", f"\t.type {sym}, @object",
                        f"\t.size {sym}, {n}", f"{sym}:", "\t.quad _ZTVN10__cxxabiv117__class_type_infoE+16",
                        f"\t.quad .Lname{i}", f"\t.zero {n - 16}", "\t.section .rodata", f".Lname{i}:",
                        f"\t.asciz \"{sym[4:]}\""]
            else:
                n = max(size, 8)
                asm += ["\t.bss", "\t.p2align 4", f"\t.globl {sym}", f"\t.type {sym}, @object", f"\t.size {sym}, {n}",
                        f"{sym}:", f"\t.zero {n}"]
        asm.append("\t.section .note.GNU-stack,\"\",@progbits")
        src = os.path.join(work, soname + ".s")
        with open(src, "w") as f:
            f.write("\n".join(asm) + "\n")
        cmd = ["gcc", "-shared", "-nostdlib", "-Wl,-soname," + soname, "-o", os.path.join(lib, soname), src]
        versions = sorted({v[1] for _, v in syms if v[1]})
        if versions:
            # A versioned reference needs its version defined by this very file; unversioned ones take the first.
            script = os.path.join(work, soname + ".map")
            with open(script, "w") as f:
                for ver in versions:
                    names = [sym for sym, v in syms if v[1] == ver or (not v[1] and ver == versions[0])]
                    f.write(ver + " { global: " + " ".join(n + ";" for n in names) + " };\n")
            cmd.append("-Wl,--version-script=" + script)
        if any(sym.startswith("_ZTI") for sym, _ in syms):
            cmd.append("-lstdc++")  # the vtable of __cxxabiv1::__class_type_info
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            fail(f"the stub {soname} did not link:\n{r.stderr}")
        kinds = {"functions": sum(v[2] == "FUNC" for _, v in syms), "data objects": sum(v[2] == "OBJECT" for _, v in syms)}
        print(f"[lockstep] stub {soname}: " + ", ".join(f"{n} {k}" for k, n in kinds.items()) +
              f" ({', '.join(sorted({v[1] for _, v in syms if v[1]})) or 'unversioned'}), needed by {', '.join(users[soname])}", flush=True)


def records(tree):
    """Rewrites each dist-info's RECORD to list the files the tree holds (wheel's RECORD lists what was
    left out, and the stripped libraries' old hashes), as pip writes it."""
    for d in sorted(os.listdir(tree)):
        if not d.endswith(".dist-info"):
            continue
        record = os.path.join(tree, d, "RECORD")
        with open(record) as f:
            tops = {line.split(",")[0].split("/")[0] for line in f if line.strip()}
        tops = {t for t in tops if t != ".." and not t.endswith(".data") and os.path.exists(os.path.join(tree, t))}
        rows = []
        for t in sorted(tops):
            if os.path.isfile(os.path.join(tree, t)):  # a top-level module, and its compiled form
                cache = os.path.join(tree, "__pycache__")
                paths = [t] + [os.path.join("__pycache__", c) for c in sorted(os.listdir(cache) if os.path.isdir(cache) else [])
                               if t.endswith(".py") and c.startswith(t[:-3] + ".")]
            else:
                paths = [os.path.relpath(os.path.join(r, n), tree) for r, _, ns in os.walk(os.path.join(tree, t)) for n in ns]
            for p in sorted(paths):
                if p == os.path.relpath(record, tree):
                    continue
                with open(os.path.join(tree, p), "rb") as f:
                    data = f.read()
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                rows.append(f"{p},sha256={digest},{len(data)}")
        rows.append(f"{os.path.relpath(record, tree)},,")
        with open(record, "w") as f:
            f.write("\n".join(rows) + "\n")


if sys.argv[1] == "stubs":
    stubs(*sys.argv[2:5])
elif sys.argv[1] == "records":
    records(sys.argv[2])
PY
log "  stubs for the libraries that are not carried"
run_with_heartbeat "making the stubs" python3 "$work/helper.py" stubs "$tree" "$CACHE/downloads/$TORCH_WHEEL" "$work"

log "  compiling every .py to .pyc (as pip install does)"
# pip's way too: a file that does not compile (there are none in these pins) is left to be compiled when imported.
run_with_heartbeat "compiling" nice python3 -m compileall -q -j 2 "$tree" > "$work/compileall.log" ||
  log "  compileall: $(grep -c '^\*\*\*' "$work/compileall.log" || true) file(s) did not compile; they stay source only"
python3 "$work/helper.py" records "$tree"

# It must import from where it is, with nothing else on the path (-S), as a CPU build, and train.
log "  checking: import torch, a CPU autograd step, torch.distributed and DDP import"
check='
import sys, torch, torch.distributed, torch.nn.parallel
want = sys.argv[1]
assert torch.__version__.split("+")[0] == want, f"torch.__version__ is {torch.__version__}, not {want}"
assert not torch.cuda.is_available(), "torch.cuda.is_available() is True"
assert torch.distributed.is_available() and torch.distributed.is_gloo_available(), "no Gloo"
x = torch.tensor([1.0, 2.0], requires_grad=True)
(x * x).sum().backward()
assert x.grad.tolist() == [2.0, 4.0], x.grad
print(torch.__version__, "imports; cuda available:", torch.cuda.is_available())
'
run_with_heartbeat "import torch" env PYTHONPATH="$tree" PYTHONDONTWRITEBYTECODE=1 \
  python3 -S -W ignore::UserWarning -c "$check" "$TORCH_VERSION" || die "the new tree fails the check above; $PYTHON_TORCH_DIR is as it was"

echo "$key" > "$tree/.complete"
rm -rf "$PYTHON_TORCH_DIR"
mv "$tree" "$PYTHON_TORCH_DIR"
log "Python torch $TORCH_VERSION (CPU): ready in $PYTHON_TORCH_DIR ($(du -sm "$PYTHON_TORCH_DIR" | cut -f1) MB) in $((SECONDS - start)) s"
