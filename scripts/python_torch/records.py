# The dist-info RECORDs of scripts/python-torch.sh's tree, rewritten to list the files the tree
# holds, as pip writes them: a wheel's RECORD lists what the tree leaves out (torch/include, the
# CUDA libraries) and the stripped libraries' old hashes.
import base64
import hashlib
import os


def record_row(path, data):
    """PATH's RECORD line for its contents DATA: path,sha256=<urlsafe base64, unpadded>,size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def record_tops(lines, exists):
    """The top-level names a RECORD's LINES list that the tree holds (EXISTS(name)), not `..` nor a .data."""
    tops = {line.split(",")[0].split("/")[0] for line in lines if line.strip()}
    return {t for t in tops if t != ".." and not t.endswith(".data") and exists(t)}


def top_files(tree, t):
    """The files of the top-level name T, relative to TREE: a module and its compiled forms, or a package's every file."""
    if os.path.isfile(os.path.join(tree, t)):  # a top-level module, and its compiled form
        cache = os.path.join(tree, "__pycache__")
        return [t] + [os.path.join("__pycache__", c) for c in sorted(os.listdir(cache) if os.path.isdir(cache) else [])
                      if t.endswith(".py") and c.startswith(t[:-3] + ".")]
    return [os.path.relpath(os.path.join(r, n), tree) for r, _, ns in os.walk(os.path.join(tree, t)) for n in ns]


def records(tree):
    """Rewrites each dist-info's RECORD under TREE to list the files the tree holds."""
    for d in sorted(os.listdir(tree)):
        if not d.endswith(".dist-info"):
            continue
        record = os.path.join(tree, d, "RECORD")
        with open(record) as f:
            tops = record_tops(f, lambda t: os.path.exists(os.path.join(tree, t)))
        rows = []
        for t in sorted(tops):
            for p in sorted(top_files(tree, t)):
                if p == os.path.relpath(record, tree):
                    continue
                with open(os.path.join(tree, p), "rb") as f:
                    rows.append(record_row(p, f.read()))
        rows.append(f"{os.path.relpath(record, tree)},,")
        with open(record, "w") as f:
            f.write("\n".join(rows) + "\n")
