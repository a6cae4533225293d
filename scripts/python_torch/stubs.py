# The stubs scripts/python-torch.sh puts in the tree's torch/lib: for each library a carried one
# needs but the tree lacks, a library of that name and soname that defines exactly the symbols
# the carried ones need of it that no carried or system library defines (with the version the
# reference asks for). Its functions return 0 and its data is zero-filled, at the size the wheel's
# real library gives; two kinds are made as the real ones are (see `function_asm`, `typeinfo_asm`).
# Deciding (which stub defines what, and its assembly) is pure; `make` reads the libraries and links.
import os
import re
import subprocess
import zipfile

from elf import Elf, defined, dynsyms, fail, needed, static_address, system_path, verneed_files

# The manylinux system libraries: a Linux that runs manylinux wheels has them; never stubbed.
SYSTEM = ["libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libutil.so.1",
          "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1"]


def carried_libraries(tree):
    """{file name: path} of the ELF shared libraries under TREE/torch (symbolic links left out)."""
    carried = {}
    for root, _, files in os.walk(os.path.join(tree, "torch")):
        for name in files:
            path = os.path.join(root, name)
            if (name.endswith(".so") or ".so." in name) and not os.path.islink(path):
                with open(path, "rb") as f:
                    if f.read(4) == b"\x7fELF":
                        carried[name] = path
    return carried


def stubbed_users(needs):
    """{stubbed soname: the carried libraries that need it}, from NEEDS, {carried library: the sonames it needs}:
    what they need that is neither carried nor a system library."""
    users = {}
    for name, sonames in sorted(needs.items()):
        for n in sonames:
            if n not in needs and n not in SYSTEM:
                users.setdefault(n, []).append(name)
    return users


class Wheel:
    """The wheel's own copies of the stubbed libraries (and the wheel libraries they need), read for
    which library defines a symbol, how big its data is, and what its functions do."""

    def __init__(self, path, carried, work):
        self.zf = zipfile.ZipFile(path)
        self.members = set(self.zf.namelist())
        self.carried = carried
        self.work = work

    def lib(self, soname):
        """The wheel's SONAME, extracted under WORK/wheel; None when the tree carries it or the wheel has none."""
        m = "torch/lib/" + soname
        if soname in self.carried or m not in self.members:
            return None
        path = os.path.join(self.work, "wheel", m)
        if not os.path.exists(path):
            self.zf.extract(m, os.path.join(self.work, "wheel"))
        return path

    def defined(self, soname):
        path = self.lib(soname)
        return defined(path) if path else {}

    def needs(self, soname):
        return needed(self.lib(soname))

    def closure(self, soname):
        """SONAME and the libraries it needs, transitively, that the wheel has and the tree lacks."""
        seen, todo = [], [soname]
        while todo:
            n = todo.pop(0)
            if n not in seen and self.lib(n):
                seen.append(n)
                todo += self.needs(n)
        return seen


def stub_of(sym, deps, wheel):
    """The stubbed library of DEPS that an unversioned SYM is asked of: the one that defines it in the
    wheel, else the one whose wheel dependencies do, else the one named like it (cuFileRead:
    libcufile.so.0), else the first; None when DEPS is empty."""
    return (next((d for d in deps if sym in wheel.defined(d)), None)
            or next((d for d in deps if any(sym in wheel.defined(c) for c in wheel.closure(d))), None)
            or next((d for d in deps if sym.lower().startswith(d[3:].split(".")[0].lower())), None)
            or (deps[0] if deps else None))


def real_definition(sym, stub, wheel):
    """(the wheel's file that defines SYM for STUB, its definition), or (None, None)."""
    for c in wheel.closure(stub):
        if sym in wheel.defined(c):
            return wheel.lib(c), wheel.defined(c)[sym]
    return None, None


def add_wanted(want, name, syms, deps, vfiles, users, provided, wheel):
    """Adds to WANT what the carried library NAME needs of a stub, from its dynamic symbols SYMS, the stubbed
    libraries it needs (DEPS) and its version needs (VFILES): symbol -> (stub, version, type, size, the real
    definition's file, the real definition). PROVIDED: what carried and system libraries define."""
    for s in syms:
        sym = s["name"]
        # Weak references may stay undefined; the CPython API is the interpreter's, which loads _C.
        if s["defined"] or s["bind"] == "WEAK" or sym in provided or re.match(r"_?Py", sym):
            continue
        if s["ver"]:
            stub = vfiles.get(s["ver"])
            if stub not in users:
                fail(f"{name} needs {sym}@{s['ver']} of {stub}, which is neither carried, a system library nor stubbed")
        else:
            stub = stub_of(sym, deps, wheel)
            if not stub:
                fail(f"{name} needs {sym}, which no carried or system library defines, and it needs no stubbed library")
        real_file, real = real_definition(sym, stub, wheel)
        typ = real["type"] if real else ("FUNC" if s["type"] == "NOTYPE" else s["type"])
        if typ not in ("FUNC", "OBJECT"):
            fail(f"{name} needs {sym} ({typ}) of {stub}; the stubs make only functions and data objects")
        if sym in want and want[sym][:2] != (stub, s["ver"]):
            fail(f"{sym} is needed of both {want[sym][0]} and {stub}")
        want[sym] = (stub, s["ver"], typ, real["size"] if real else 0, real_file, real)


def function_asm(i, sym, data_size):
    """A function that returns 0, or, when the real one returns the address of its static data (a
    reference, which callers write through: DATA_SIZE is that data's), zero-filled data of that size."""
    asm = ["\t.text", f"\t.globl {sym}", f"\t.type {sym}, @function", f"{sym}:"]
    if data_size is not None:
        return asm + [f"\tleaq .Ldata{i}(%rip), %rax", "\tret", f"\t.size {sym}, .-{sym}",
                      "\t.bss", "\t.p2align 4", f".Ldata{i}:", f"\t.zero {data_size}"]
    # returns 0 (integer, pointer, a pair of them, or floating point)
    return asm + ["\txorl %eax, %eax", "\txorl %edx, %edx", "\tpxor %xmm0, %xmm0", "\tret", f"\t.size {sym}, .-{sym}"]


def typeinfo_asm(i, sym, size):
    """A std::type_info: zero-filled it would have no name, which pybind11 hashes and compares when it
    registers the class; so a class_type_info naming the type."""
    n = max(size, 16)
    return ["\t.section .data.rel.ro,\"aw\"", "\t.p2align 3", f"\t.globl {sym}", f"\t.type {sym}, @object",
            f"\t.size {sym}, {n}", f"{sym}:", "\t.quad _ZTVN10__cxxabiv117__class_type_infoE+16",
            f"\t.quad .Lname{i}", f"\t.zero {n - 16}", "\t.section .rodata", f".Lname{i}:",
            f"\t.asciz \"{sym[4:]}\""]


def object_asm(sym, size):
    n = max(size, 8)
    return ["\t.bss", "\t.p2align 4", f"\t.globl {sym}", f"\t.type {sym}, @object", f"\t.size {sym}, {n}",
            f"{sym}:", f"\t.zero {n}"]


def assembly(soname, syms, data_size):
    """The stub SONAME's assembly source, for SYMS, sorted [(symbol, want's value)]; DATA_SIZE(real file,
    real definition): the size of the static data a real function returns the address of, or None."""
    asm = [f"# A stub of {soname} for a CPU-only torch, made by scripts/python-torch.sh."]
    for i, (sym, (_, ver, typ, size, real_file, real)) in enumerate(syms):
        if typ == "FUNC":
            asm += function_asm(i, sym, data_size(real_file, real) if real else None)
        elif sym.startswith("_ZTI"):
            asm += typeinfo_asm(i, sym, size)
        else:
            asm += object_asm(sym, size)
    asm.append("\t.section .note.GNU-stack,\"\",@progbits")
    return "\n".join(asm) + "\n"


def version_script(syms):
    """The linker's version script for SYMS, or None when none is versioned. A versioned reference needs
    its version defined by this very file; unversioned ones take the first."""
    versions = sorted({v[1] for _, v in syms if v[1]})
    lines = []
    for ver in versions:
        names = [sym for sym, v in syms if v[1] == ver or (not v[1] and ver == versions[0])]
        lines.append(ver + " { global: " + " ".join(n + ";" for n in names) + " };\n")
    return "".join(lines) or None


def summary(soname, syms, users):
    kinds = {"functions": sum(v[2] == "FUNC" for _, v in syms), "data objects": sum(v[2] == "OBJECT" for _, v in syms)}
    return (f"[lockstep] stub {soname}: " + ", ".join(f"{n} {k}" for k, n in kinds.items()) +
            f" ({', '.join(sorted({v[1] for _, v in syms if v[1]})) or 'unversioned'}), needed by {', '.join(users)}")


def static_data_size(elves, real_file, real):
    """The size of the static data whose address the real function returns (static_address), or None."""
    if real_file not in elves:
        elves[real_file] = Elf(real_file)
    elf = elves[real_file]
    target = static_address(elf, real["value"])
    return None if target is None else max(elf.object_size(target) or 64, 8)


def link(soname, syms, asm, lib, work):
    """Assembles and links the stub SONAME into LIB (its source and version script under WORK)."""
    src = os.path.join(work, soname + ".s")
    with open(src, "w") as f:
        f.write(asm)
    cmd = ["gcc", "-shared", "-nostdlib", "-Wl,-soname," + soname, "-o", os.path.join(lib, soname), src]
    versions = version_script(syms)
    if versions:
        script = os.path.join(work, soname + ".map")
        with open(script, "w") as f:
            f.write(versions)
        cmd.append("-Wl,--version-script=" + script)
    if any(sym.startswith("_ZTI") for sym, _ in syms):
        cmd.append("-lstdc++")  # the vtable of __cxxabiv1::__class_type_info
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        fail(f"the stub {soname} did not link:\n{r.stderr}")


def make(tree, wheel, work):
    """Stubs in TREE/torch/lib for what the carried libraries need and the tree lacks (WHEEL: the torch wheel)."""
    carried = carried_libraries(tree)
    provided = set()  # what a carried or system library defines
    for path in list(carried.values()) + [system_path(s) for s in SYSTEM]:
        provided |= defined(path).keys()
    users = stubbed_users({name: needed(path) for name, path in carried.items()})
    whl = Wheel(wheel, carried, work)
    want = {}
    for name, path in sorted(carried.items()):
        deps = [n for n in needed(path) if n in users]
        add_wanted(want, name, dynsyms(path), deps, verneed_files(path), users, provided, whl)
    elves = {}
    for soname in sorted(users):
        syms = sorted((sym, v) for sym, v in want.items() if v[0] == soname)
        asm = assembly(soname, syms, lambda real_file, real: static_data_size(elves, real_file, real))
        link(soname, syms, asm, os.path.join(tree, "torch", "lib"), work)
        print(summary(soname, syms, users[soname]), flush=True)
