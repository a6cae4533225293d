# records.py on a small fake tree: the RECORD rows pip writes, for the files the tree holds.
import os
import tempfile
import unittest

import records


def write(root, path, data):
    os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
    with open(os.path.join(root, path), "wb") as f:
        f.write(data)


def fake_tree(tree):
    """A package, a top-level module with its compiled form, and a dist-info whose RECORD lists
    what the tree lacks (a CUDA library, a .data script, a file outside, a package not there)."""
    write(tree, "pkg/__init__.py", b"")
    write(tree, "pkg/sub/a.py", b"hello")
    write(tree, "mod.py", b"x = 1\n")
    write(tree, "__pycache__/mod.cpython-311.pyc", b"pyc")
    write(tree, "__pycache__/model.cpython-311.pyc", b"another module's")
    write(tree, "other/b.py", b"not listed")
    write(tree, "pkg-1.0.dist-info/METADATA", b"Name: pkg\n")
    write(tree, "pkg-1.0.dist-info/RECORD", b"\n".join([
        b"pkg/__init__.py,sha256=old,3", b"pkg/lib/libtorch_cuda.so,sha256=old,9", b"mod.py,,",
        b"pkg-1.0.data/scripts/pkg,sha256=old,1", b"../../bin/pkg,sha256=old,1", b"gone/x.py,sha256=old,1",
        b"pkg-1.0.dist-info/METADATA,sha256=old,1", b"pkg-1.0.dist-info/RECORD,,", b""]))


class Records(unittest.TestCase):
    def test_a_row_is_the_path_the_unpadded_urlsafe_sha256_and_the_size(self):
        self.assertEqual(records.record_row("a/b.py", b""), "a/b.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0")
        self.assertEqual(records.record_row("x", b"hello"), "x,sha256=LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ,5")

    def test_the_tops_are_what_the_tree_holds_not_dot_dot_nor_data(self):
        lines = ["pkg/a.py,sha256=x,1\n", "\n", "../../bin/x,,\n", "pkg-1.0.data/scripts/x,,\n", "gone/y.py,,\n", "mod.py,,\n"]
        self.assertEqual(records.record_tops(lines, lambda t: t != "gone"), {"pkg", "mod.py"})

    def test_the_record_lists_every_file_the_tree_holds_of_its_tops_and_itself_last(self):
        with tempfile.TemporaryDirectory() as tree:
            fake_tree(tree)
            write(tree, "notes.txt", b"not a dist-info")
            records.records(tree)
            with open(os.path.join(tree, "pkg-1.0.dist-info/RECORD")) as f:
                rows = f.read().splitlines()
        self.assertEqual(rows, [
            records.record_row("__pycache__/mod.cpython-311.pyc", b"pyc"),
            records.record_row("mod.py", b"x = 1\n"),
            records.record_row("pkg/__init__.py", b""),
            records.record_row("pkg/sub/a.py", b"hello"),
            records.record_row("pkg-1.0.dist-info/METADATA", b"Name: pkg\n"),
            "pkg-1.0.dist-info/RECORD,,"])


if __name__ == "__main__":
    unittest.main()
