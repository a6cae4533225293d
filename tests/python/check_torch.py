# Run by python_torch_test with the tree on PYTHONPATH: which torch this is, whether it sees CUDA, and
# one autograd gradient. argv[1]: {"w": [...], "x": [...], "y": [...]}; prints one line, RESULT {json}.
import json
import sys

import torch

inputs = json.loads(sys.argv[1])
w = torch.tensor(inputs["w"], dtype=torch.float64, requires_grad=True)
x = torch.tensor(inputs["x"], dtype=torch.float64)
y = torch.tensor(inputs["y"], dtype=torch.float64)
loss = ((torch.tanh(w * x) - y) ** 2).sum()
loss.backward()
print("RESULT " + json.dumps({
    "version": torch.__version__,
    "file": torch.__file__,
    "cuda_available": torch.cuda.is_available(),
    "cuda_device_count": torch.cuda.device_count(),
    "loss": loss.item(),
    "grad": w.grad.tolist(),
}), flush=True)
