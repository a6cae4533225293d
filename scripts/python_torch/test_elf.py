# elf.py on small fake inputs: readelf's and ldconfig's text as readelf 2.40 and glibc 2.36
# print it, and a hand-made ELF file.
import gc
import os
import struct
import tempfile
import unittest
import warnings

import elf

DYN_SYMS = """
Symbol table '.dynsym' contains 6 entries:
   Num:    Value          Size Type    Bind   Vis      Ndx Name
     0: 0000000000000000     0 NOTYPE  LOCAL  DEFAULT  UND 
     1: 0000000000001000     9 FUNC    GLOBAL DEFAULT    7 cudnnGetProperty@@libcudnn.so.9
     2: 0000000000000000     0 FUNC    WEAK   DEFAULT  UND pthread_once@GLIBC_2.2.5 (2)
     3: 0000000000000000     0 NOTYPE  GLOBAL DEFAULT  UND cuFileRead
     4: 00000000002a1b40 0x1f40 OBJECT  GLOBAL DEFAULT   24 _ZN3c104cuda7kTableE
"""

DYNAMIC = """
Dynamic section at offset 0x1487ad8 contains 40 entries:
  Tag        Type                         Name/Value
 0x0000000000000001 (NEEDED)             Shared library: [libtorch.so]
 0x0000000000000001 (NEEDED)             Shared library: [libc10_cuda.so]
 0x000000000000001d (RUNPATH)            Library runpath: [$ORIGIN]
 0x0000000000000001 (NEEDED)             Shared library: [libstdc++.so.6]
"""

VERSIONS = """
Version definition section '.gnu.version_d' contains 2 entries:
  000000: Rev: 1  Flags: BASE  Index: 1  Cnt: 1  Name: libtorch_python.so
Version needs section '.gnu.version_r' contains 2 entries:
  000000: Version: 1  File: libcudnn.so.9  Cnt: 1
  0x0010:   Name: libcudnn.so.9  Flags: none  Version: 31
  0x0020: Version: 1  File: libc.so.6  Cnt: 2
  0x0030:   Name: GLIBC_2.3  Flags: none  Version: 24
  0x0040:   Name: GLIBC_2.2.5  Flags: none  Version: 2
"""

LDCONFIG = """1234 libs found in cache `/etc/ld.so.cache'
\tlibstdc++.so.6 (libc6) => /usr/lib32/libstdc++.so.6
\tlibstdc++.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libstdc++.so.6
\tlibm.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libm.so.6
"""


class ReadelfText(unittest.TestCase):
    def test_dynsyms_are_the_numbered_lines_with_version_binding_size_and_whether_defined(self):
        syms = elf.parse_dynsyms(DYN_SYMS)
        self.assertEqual([s["name"] for s in syms], ["cudnnGetProperty", "pthread_once", "cuFileRead", "_ZN3c104cuda7kTableE"])
        self.assertEqual(syms[0], dict(name="cudnnGetProperty", ver="libcudnn.so.9", type="FUNC", bind="GLOBAL", size=9,
                                       value=0x1000, defined=True))
        self.assertEqual((syms[1]["ver"], syms[1]["bind"], syms[1]["defined"]), ("GLIBC_2.2.5", "WEAK", False))
        self.assertEqual((syms[2]["ver"], syms[2]["type"]), (None, "NOTYPE"))
        self.assertEqual((syms[3]["size"], syms[3]["value"]), (0x1f40, 0x2a1b40))

    def test_needed_lists_the_needed_sonames_in_order(self):
        self.assertEqual(elf.parse_needed(DYNAMIC), ["libtorch.so", "libc10_cuda.so", "libstdc++.so.6"])

    def test_verneed_maps_each_version_to_its_file_and_ignores_the_definitions(self):
        self.assertEqual(elf.parse_verneed(VERSIONS),
                         {"libcudnn.so.9": "libcudnn.so.9", "GLIBC_2.3": "libc.so.6", "GLIBC_2.2.5": "libc.so.6"})

    def test_ldconfig_gives_the_x86_64_library_or_none(self):
        self.assertEqual(elf.parse_ldconfig(LDCONFIG, "libstdc++.so.6"), "/lib/x86_64-linux-gnu/libstdc++.so.6")
        self.assertEqual(elf.parse_ldconfig(LDCONFIG, "libm.so.6"), "/lib/x86_64-linux-gnu/libm.so.6")
        self.assertIsNone(elf.parse_ldconfig(LDCONFIG, "libutil.so.1"))


class FakeCode:
    def __init__(self, at, code):
        self.at, self.code = at, code

    def read(self, addr, n):
        return self.code[addr - self.at:addr - self.at + n] if addr == self.at else b""


class StaticAddress(unittest.TestCase):
    LEA_RET = b"\x48\x8d\x05" + struct.pack("<i", 0x100) + b"\xc3"  # lea 0x100(%rip), %rax; ret

    def test_a_function_that_only_returns_a_rip_relative_address_returns_that_address(self):
        self.assertEqual(elf.static_address(FakeCode(0x1000, self.LEA_RET + b"\0" * 4), 0x1000), 0x1000 + 7 + 0x100)

    def test_endbr64_before_it_is_skipped(self):
        code = b"\xf3\x0f\x1e\xfa" + self.LEA_RET
        self.assertEqual(elf.static_address(FakeCode(0x1000, code), 0x1000), 0x1004 + 7 + 0x100)

    def test_any_other_code_or_none_is_not_such_a_function(self):
        self.assertIsNone(elf.static_address(FakeCode(0x1000, self.LEA_RET[:7] + b"\x90"), 0x1000))
        self.assertIsNone(elf.static_address(FakeCode(0x1000, b"\x31\xc0\xc3"), 0x1000))
        self.assertIsNone(elf.static_address(FakeCode(0x1000, self.LEA_RET), 0x2000))


def fake_elf(path):
    """An ELF header, one PT_LOAD (16 bytes at 0x200 mapped at 0x1000) and a .dynsym of 4 symbols."""
    code = bytes(range(16))
    syms = [struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0),
            struct.pack("<IBBHQQ", 1, 0x21, 0, 5, 0x2000, 48),  # a weak object
            struct.pack("<IBBHQQ", 2, 0x11, 0, 5, 0x2000, 32),  # a global object at the same address, smaller
            struct.pack("<IBBHQQ", 3, 0x12, 0, 5, 0x3000, 16),  # a function
            struct.pack("<IBBHQQ", 4, 0x11, 0, 0, 0x4000, 8)]   # an undefined object
    sections = [struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                struct.pack("<IIQQQQIIQQ", 1, 11, 0, 0, 0x300, 24 * len(syms), 0, 0, 8, 24)]
    header = b"\x7fELF\x02\x01\x01" + b"\0" * 9 + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 120, 0, 64, 56, 1, 64,
                                                              len(sections), 0)
    ph = struct.pack("<IIQQQQQQ", 1, 5, 0x200, 0x1000, 0x1000, len(code), len(code), 0x1000)
    data = bytearray(0x400)
    data[0:64], data[64:120], data[120:120 + 64 * len(sections)] = header, ph, b"".join(sections)
    data[0x200:0x210] = code
    data[0x300:0x300 + 24 * len(syms)] = b"".join(syms)
    with open(path, "wb") as f:
        f.write(data)


class ElfFile(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "libfake.so")
        fake_elf(self.path)

    def tearDown(self):
        self.dir.cleanup()

    def test_reads_code_at_a_loaded_address_and_nothing_elsewhere(self):
        e = elf.Elf(self.path)
        self.assertEqual(e.read(0x1004, 4), bytes([4, 5, 6, 7]))
        self.assertEqual(e.read(0x5000, 4), b"")
        e.f.close()

    def test_object_size_is_the_largest_defined_object_at_the_address(self):
        e = elf.Elf(self.path)
        self.assertEqual(e.object_size(0x2000), 48)
        self.assertIsNone(e.object_size(0x3000))  # a function
        self.assertIsNone(e.object_size(0x4000))  # undefined
        e.f.close()

    def test_a_file_that_is_not_a_64_bit_little_endian_elf_is_refused(self):
        with open(self.path, "wb") as f:
            f.write(b"#!/bin/sh\n" + b"\0" * 64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # it exits with the file open
            with self.assertRaises(SystemExit) as e:
                elf.Elf(self.path)
            gc.collect()
        self.assertEqual(str(e.exception.code), f"[lockstep] error: python-torch: {self.path} is not a 64-bit little-endian ELF file")


if __name__ == "__main__":
    unittest.main()
