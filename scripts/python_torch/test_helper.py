# helper.py as scripts/python-torch.sh runs it: `python3 -B helper.py records TREE`.
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

import records
from test_records import fake_tree

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "helper.py")


class Helper(unittest.TestCase):
    def test_records_rewrites_the_trees_records_from_any_directory(self):
        with tempfile.TemporaryDirectory() as tree:
            fake_tree(tree)
            r = subprocess.run([sys.executable, "-B", HELPER, "records", tree], cwd=tree, capture_output=True, text=True)
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "", ""))
            with open(os.path.join(tree, "pkg-1.0.dist-info/RECORD")) as f:
                rows = f.read().splitlines()
        self.assertEqual(rows[0], records.record_row("__pycache__/mod.cpython-311.pyc", b"pyc"))
        self.assertEqual(rows[-1], "pkg-1.0.dist-info/RECORD,,")

    @unittest.skipUnless(shutil.which("gcc") and shutil.which("readelf"), "needs gcc and readelf (build-essential)")
    def test_stubs_makes_a_stub_for_a_library_the_tree_lacks_from_the_wheels_copy(self):
        with tempfile.TemporaryDirectory() as work:
            def gcc(out, code, *flags):
                src = os.path.join(work, "src.c")
                with open(src, "w") as f:
                    f.write(code)
                subprocess.run(["gcc", "-shared", "-fPIC", "-o", out, src, *flags], check=True)

            # The wheel's libcuda_thing.so (a real function), and a carried library that calls it.
            real = os.path.join(work, "torch", "lib", "libcuda_thing.so")
            os.makedirs(os.path.dirname(real))
            gcc(real, "int cuda_thing(void) { return 7; }\n", "-Wl,-soname,libcuda_thing.so")
            wheel = os.path.join(work, "torch.whl")
            with zipfile.ZipFile(wheel, "w") as z:
                z.write(real, "torch/lib/libcuda_thing.so")
            lib = os.path.join(work, "tree", "torch", "lib")
            os.makedirs(lib)
            gcc(os.path.join(lib, "libuser.so"), "int cuda_thing(void);\nint user(void) { return cuda_thing(); }\n",
                "-L" + os.path.dirname(real), "-lcuda_thing")

            r = subprocess.run([sys.executable, "-B", HELPER, "stubs", os.path.join(work, "tree"), wheel, work],
                               capture_output=True, text=True)
            self.assertEqual((r.returncode, r.stderr), (0, ""))
            self.assertEqual(r.stdout, "[lockstep] stub libcuda_thing.so: 1 functions, 0 data objects (unversioned), "
                                       "needed by libuser.so\n")
            syms = subprocess.run(["readelf", "-W", "--dyn-syms", os.path.join(lib, "libcuda_thing.so")],
                                  capture_output=True, text=True, check=True).stdout
            self.assertRegex(syms, r"FUNC +GLOBAL +DEFAULT +\d+ cuda_thing\n")

if __name__ == "__main__":
    unittest.main()
