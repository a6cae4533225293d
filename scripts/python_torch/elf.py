# What scripts/python-torch.sh's stubs need to know of an ELF shared library: its dynamic symbols,
# the libraries it needs and the versions it asks of them (from readelf), where the system keeps
# a library (ldconfig), and a few bytes of code and the sizes of data objects (read directly).
# The parse_* functions are pure: they read readelf's or ldconfig's text, given as a string.
import re
import struct
import subprocess
import sys


def fail(msg):
    sys.exit("[lockstep] error: python-torch: " + msg)


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=True).stdout


def parse_dynsyms(text):
    """`readelf -W --dyn-syms`'s symbols: name, version (None when unversioned), type, binding, size, value, defined."""
    out = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 8 or not re.fullmatch(r"[1-9]\d*:", f[0]):
            continue
        name, _, ver = f[7].partition("@")
        out.append(dict(name=name, ver=ver.lstrip("@") or None, type=f[3], bind=f[4], size=int(f[2], 0),
                        value=int(f[1], 16), defined=f[6] != "UND"))
    return out


_syms = {}


def dynsyms(path):
    """PATH's dynamic symbols (parse_dynsyms)."""
    if path not in _syms:
        _syms[path] = parse_dynsyms(readelf("--dyn-syms", path))
    return _syms[path]


_defs = {}


def defined(path):
    if path not in _defs:
        _defs[path] = {s["name"]: s for s in dynsyms(path) if s["defined"]}
    return _defs[path]


def parse_needed(text):
    """The sonames `readelf -W -d` lists as NEEDED, in order."""
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+)\]", text)


def needed(path):
    return parse_needed(readelf("-d", path))


def parse_verneed(text):
    """{version name: the file `readelf -W -V`'s version-needs section asks it of}"""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.search(r"File: (\S+)", line)
        if m:
            cur = m.group(1)
        m = re.search(r"Name: (\S+)", line)
        if m and cur:
            out[m.group(1)] = cur
    return out


def verneed_files(path):
    return parse_verneed(readelf("-V", path))


def parse_ldconfig(text, soname):
    """Where `ldconfig -p` says the x86-64 SONAME is, or None."""
    m = re.search(r"^\s+" + re.escape(soname) + r" \((?:libc6,)?x86-64[^)]*\) => (\S+)$", text, re.M)
    return m.group(1) if m else None


def system_path(soname):
    path = parse_ldconfig(subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout, soname)
    if not path:
        fail(f"the system library {soname} is not in ldconfig's cache")
    return path


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
