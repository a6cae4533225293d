# scripts/python-torch.sh's check of a new tree, run with only the tree on the path (python3 -S,
# PYTHONPATH=the tree): it imports, is the pinned version (argv[1]), runs as a CPU build, has
# torch.distributed with Gloo, and takes an autograd step.
import sys

import torch
import torch.distributed
import torch.nn.parallel  # DDP

want = sys.argv[1]
assert torch.__version__.split("+")[0] == want, f"torch.__version__ is {torch.__version__}, not {want}"
assert not torch.cuda.is_available(), "torch.cuda.is_available() is True"
assert torch.distributed.is_available() and torch.distributed.is_gloo_available(), "no Gloo"
x = torch.tensor([1.0, 2.0], requires_grad=True)
(x * x).sum().backward()
assert x.grad.tolist() == [2.0, 4.0], x.grad
print(torch.__version__, "imports; cuda available:", torch.cuda.is_available())
