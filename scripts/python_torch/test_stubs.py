# stubs.py's decisions on small fake inputs: which libraries are stubbed, which stub defines a
# symbol, and each stub's assembly and version script.
import os
import tempfile
import unittest

import stubs


class FakeWheel(stubs.Wheel):
    """A wheel of LIBS, {soname: (the sonames it needs, {symbol: definition})}, beside a tree carrying CARRIED."""

    def __init__(self, libs, carried=()):
        self.libs, self.carried = libs, set(carried)

    def lib(self, soname):
        return None if soname in self.carried or soname not in self.libs else "wheel/" + soname

    def defined(self, soname):
        return self.libs[soname][1] if self.lib(soname) else {}

    def needs(self, soname):
        return self.libs[soname][0]


def func(size=0, value=0x1000):
    return dict(type="FUNC", size=size, value=value)


def sym(name, ver=None, type="FUNC", bind="GLOBAL", defined=False):
    return dict(name=name, ver=ver, type=type, bind=bind, size=0, value=0, defined=defined)


WHEEL = FakeWheel({
    "libtorch_cuda.so": (["libc10_cuda.so", "libcudart.so.13", "libc.so.6"], {"_ZN2at4cuda4getEv": func()}),
    "libc10_cuda.so": (["libc10.so"], {"_ZN3c104cuda9GetDeviceEv": func(), "_ZN3c104cuda6kTableE": dict(type="OBJECT", size=96, value=0)}),
    "libcudart.so.13": ([], {"cudaFree": func()}),
    "libcudnn.so.9": ([], {"cudnnGetProperty": func()}),
}, carried={"libcudart.so.13"})


class WhatIsStubbed(unittest.TestCase):
    def test_a_needed_library_neither_carried_nor_a_system_one_is_stubbed_for_its_users(self):
        needs = {"libtorch_python.so": ["libtorch.so", "libtorch_cuda.so", "libc.so.6", "libc10_cuda.so"],
                 "libtorch.so": ["libtorch_cuda.so", "libc10.so", "libstdc++.so.6"], "libc10.so": []}
        self.assertEqual(stubs.stubbed_users(needs), {"libtorch_cuda.so": ["libtorch.so", "libtorch_python.so"],
                                                      "libc10_cuda.so": ["libtorch_python.so"]})

    def test_the_carried_libraries_are_the_elf_files_named_so_not_links(self):
        with tempfile.TemporaryDirectory() as tree:
            lib = os.path.join(tree, "torch", "lib")
            os.makedirs(lib)
            for name, data in [("libc10.so", b"\x7fELF..."), ("libgomp.so.1", b"\x7fELF..."), ("notes.so", b"text"),
                               ("_C.py", b"\x7fELF...")]:
                with open(os.path.join(lib, name), "wb") as f:
                    f.write(data)
            os.symlink("libgomp.so.1", os.path.join(lib, "libgomp.so"))
            self.assertEqual(stubs.carried_libraries(tree), {"libc10.so": os.path.join(lib, "libc10.so"),
                                                             "libgomp.so.1": os.path.join(lib, "libgomp.so.1")})


class WhichStub(unittest.TestCase):
    def test_the_closure_is_what_the_wheel_has_and_the_tree_lacks_breadth_first_once_each(self):
        self.assertEqual(WHEEL.closure("libtorch_cuda.so"), ["libtorch_cuda.so", "libc10_cuda.so"])
        self.assertEqual(WHEEL.closure("libcudart.so.13"), [])
        self.assertEqual(WHEEL.closure("libcufile.so.0"), [])
        wheel = FakeWheel({"a": (["b", "c"], {}), "b": (["d", "a"], {}), "c": (["b"], {}), "d": ([], {})})
        self.assertEqual(wheel.closure("a"), ["a", "b", "c", "d"])

    def test_the_stub_that_defines_it_in_the_wheel_comes_first(self):
        deps = ["libtorch_cuda.so", "libc10_cuda.so"]
        self.assertEqual(stubs.stub_of("_ZN3c104cuda9GetDeviceEv", deps, WHEEL), "libc10_cuda.so")

    def test_else_the_stub_whose_wheel_dependencies_define_it(self):
        self.assertEqual(stubs.stub_of("_ZN3c104cuda9GetDeviceEv", ["libcufile.so.0", "libtorch_cuda.so"], WHEEL),
                         "libtorch_cuda.so")

    def test_else_the_stub_named_like_it_else_the_first(self):
        deps = ["libtorch_cuda.so", "libcufile.so.0"]
        self.assertEqual(stubs.stub_of("cuFileRead", deps, WHEEL), "libcufile.so.0")
        self.assertEqual(stubs.stub_of("nowhere", deps, WHEEL), "libtorch_cuda.so")
        self.assertIsNone(stubs.stub_of("nowhere", [], WHEEL))

    def test_the_real_definition_is_the_first_in_the_closure(self):
        self.assertEqual(stubs.real_definition("_ZN3c104cuda6kTableE", "libtorch_cuda.so", WHEEL),
                         ("wheel/libc10_cuda.so", WHEEL.libs["libc10_cuda.so"][1]["_ZN3c104cuda6kTableE"]))
        self.assertEqual(stubs.real_definition("cuFileRead", "libcufile.so.0", WHEEL), (None, None))


class Wanted(unittest.TestCase):
    USERS = {"libtorch_cuda.so": ["libtorch.so"], "libcudnn.so.9": ["libtorch.so"], "libcufile.so.0": ["libtorch.so"]}
    DEPS = ["libtorch_cuda.so", "libcudnn.so.9", "libcufile.so.0"]

    def wanted(self, syms, provided=(), vfiles=None, want=None):
        want = {} if want is None else want
        stubs.add_wanted(want, "libtorch.so", syms, self.DEPS, vfiles or {"libcudnn.so.9": "libcudnn.so.9"}, self.USERS,
                         set(provided), WHEEL)
        return want

    def test_what_is_defined_weak_provided_or_the_interpreters_is_not_wanted(self):
        syms = [sym("defined_here", defined=True), sym("pthread_once", bind="WEAK"), sym("memcpy"), sym("PyList_New"),
                sym("_Py_Dealloc")]
        self.assertEqual(self.wanted(syms, provided={"memcpy"}), {})

    def test_a_versioned_symbol_goes_to_the_file_its_version_is_asked_of(self):
        want = self.wanted([sym("cudnnGetProperty", ver="libcudnn.so.9")])
        self.assertEqual(want, {"cudnnGetProperty": ("libcudnn.so.9", "libcudnn.so.9", "FUNC", 0, "wheel/libcudnn.so.9",
                                                     WHEEL.libs["libcudnn.so.9"][1]["cudnnGetProperty"])})

    def test_an_unversioned_one_takes_the_real_type_and_size_and_notype_is_a_function(self):
        want = self.wanted([sym("_ZN3c104cuda6kTableE", type="NOTYPE"), sym("cuFileRead", type="NOTYPE")])
        self.assertEqual(want["_ZN3c104cuda6kTableE"][:5], ("libtorch_cuda.so", None, "OBJECT", 96, "wheel/libc10_cuda.so"))
        self.assertEqual(want["cuFileRead"], ("libcufile.so.0", None, "FUNC", 0, None, None))

    def test_what_cannot_be_stubbed_is_refused(self):
        for syms, vfiles, message in [
                ([sym("f", ver="GLIBC_9")], {"GLIBC_9": "libc.so.6"}, "libtorch.so needs f@GLIBC_9 of libc.so.6, which is neither"),
                ([sym("tls", type="TLS")], None, "libtorch.so needs tls (TLS) of libtorch_cuda.so; the stubs make only")]:
            with self.subTest(message=message), self.assertRaises(SystemExit) as e:
                self.wanted(syms, vfiles=vfiles)
            self.assertIn(message, str(e.exception.code))

    def test_a_library_with_no_stubbed_dependency_cannot_want_anything(self):
        with self.assertRaises(SystemExit) as e:
            stubs.add_wanted({}, "libshm.so", [sym("cuFileRead")], [], {}, self.USERS, set(), WHEEL)
        self.assertIn("libshm.so needs cuFileRead, which no carried or system library defines", str(e.exception.code))

    def test_a_symbol_wanted_of_two_stubs_is_refused(self):
        want = self.wanted([sym("cuFileRead")])
        with self.assertRaises(SystemExit) as e:
            self.wanted([sym("cuFileRead", ver="libcudnn.so.9")], want=want)
        self.assertIn("cuFileRead is needed of both libcufile.so.0 and libcudnn.so.9", str(e.exception.code))


class Assembly(unittest.TestCase):
    SYMS = [("_ZN3c104cuda12get_checkerEv", ("libx.so", None, "FUNC", 0, "wheel/libx.so", func(value=0x10))),
            ("_ZTIN3c104cuda5EventE", ("libx.so", None, "OBJECT", 24, None, None)),
            ("cuFileRead", ("libx.so", "libx.so.1", "FUNC", 0, None, None)),
            ("kTable", ("libx.so", None, "OBJECT", 4, None, None))]

    def test_each_kind_of_symbol(self):
        asked = []
        asm = stubs.assembly("libx.so", self.SYMS, lambda f, real: asked.append((f, real["value"])) or 40).splitlines()
        self.assertEqual(asked, [("wheel/libx.so", 0x10)])  # only for a function with a real definition
        self.assertEqual(asm[0], "# A stub of libx.so for a CPU-only torch, made by scripts/python-torch.sh.")
        self.assertEqual(asm[-1], "\t.section .note.GNU-stack,\"\",@progbits")
        text = "\n".join(asm)
        # The function returning its static data: zero-filled data of the size asked.
        self.assertIn("_ZN3c104cuda12get_checkerEv:\n\tleaq .Ldata0(%rip), %rax\n\tret\n", text)
        self.assertIn(".Ldata0:\n\t.zero 40\n", text)
        # The type_info names its type and is at least 16 bytes.
        self.assertIn("\t.size _ZTIN3c104cuda5EventE, 24\n_ZTIN3c104cuda5EventE:\n\t.quad _ZTVN10__cxxabiv117__class_type_infoE+16"
                      "\n\t.quad .Lname1\n\t.zero 8\n", text)
        self.assertIn(".Lname1:\n\t.asciz \"N3c104cuda5EventE\"", text)
        # A function returning 0, in every return register.
        self.assertIn("cuFileRead:\n\txorl %eax, %eax\n\txorl %edx, %edx\n\tpxor %xmm0, %xmm0\n\tret\n", text)
        # Data, zero-filled, at least 8 bytes.
        self.assertIn("\t.size kTable, 8\nkTable:\n\t.zero 8", text)

    def test_a_type_info_is_at_least_16_bytes(self):
        asm = stubs.assembly("libx.so", [("_ZTI1A", ("libx.so", None, "OBJECT", 0, None, None))], None)
        self.assertIn("\t.size _ZTI1A, 16\n", asm)
        self.assertIn("\t.quad .Lname0\n\t.zero 0\n", asm)

    def test_a_function_whose_real_code_returns_no_static_address_returns_zero(self):
        asm = stubs.assembly("libx.so", self.SYMS[:1], lambda f, real: None)
        self.assertIn("\txorl %eax, %eax", asm)
        self.assertNotIn(".Ldata0", asm)

    def test_the_version_script_puts_the_unversioned_symbols_in_the_first_version(self):
        syms = [("a", ("s", "V2", "FUNC")), ("b", ("s", None, "FUNC")), ("c", ("s", "V1", "FUNC"))]
        self.assertEqual(stubs.version_script(syms), "V1 { global: b; c; };\nV2 { global: a; };\n")
        self.assertIsNone(stubs.version_script([("b", ("s", None, "FUNC"))]))

    def test_the_summary_counts_functions_and_data(self):
        self.assertEqual(stubs.summary("libx.so", self.SYMS, ["libtorch.so", "libtorch_python.so"]),
                         "[lockstep] stub libx.so: 2 functions, 2 data objects (libx.so.1), needed by libtorch.so, libtorch_python.so")
        self.assertIn("(unversioned)", stubs.summary("libx.so", self.SYMS[:1], ["libtorch.so"]))

    def test_static_data_is_at_least_8_bytes_and_64_when_its_size_is_unknown(self):
        class FakeElf:
            def __init__(self, sizes):
                self.sizes = sizes

            def read(self, addr, n):  # lea 0x100(%rip), %rax; ret
                return b"\x48\x8d\x05\x00\x01\x00\x00\xc3" if addr == 0x10 else b""

            def object_size(self, addr):
                return self.sizes.get(addr)

        target = 0x10 + 7 + 0x100
        for sizes, want in [({target: 24}, 24), ({target: 4}, 8), ({}, 64)]:
            self.assertEqual(stubs.static_data_size({"f": FakeElf(sizes)}, "f", func(value=0x10)), want)
        self.assertIsNone(stubs.static_data_size({"f": FakeElf({})}, "f", func(value=0x20)))


if __name__ == "__main__":
    unittest.main()
