# A torchrun-style DDP program on Gloo, as a user would write it: everything about the job comes from
# torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT through init_method env://).
# python_torch_test starts one per rank. argv[1]: {"weight": [...], "bias": b, "inputs": [per rank
# [[...], ...]], "targets": [per rank [...]], "lr": lr}: a Linear(n, 1) with that weight and bias,
# trained one SGD step on the rank's inputs with a summed squared error. Prints RESULT {json}: the
# gradients DDP left (all-reduced: the mean over ranks), the weights after the step, what the CPU
# profiler recorded, and whether torch.save/torch.load give the state back.
import io
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

job = json.loads(sys.argv[1])
dist.init_process_group(backend="gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]) and world_size == int(os.environ["WORLD_SIZE"])

model = torch.nn.Linear(len(job["weight"]), 1).double()
with torch.no_grad():
    model.weight.copy_(torch.tensor([job["weight"]], dtype=torch.float64))
    model.bias.fill_(job["bias"])
ddp = DistributedDataParallel(model)
optimizer = torch.optim.SGD(ddp.parameters(), lr=job["lr"])
x = torch.tensor(job["inputs"][rank], dtype=torch.float64)
t = torch.tensor(job["targets"][rank], dtype=torch.float64)

with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    optimizer.zero_grad()
    loss = ((ddp(x).squeeze(1) - t) ** 2).sum()
    loss.backward()
grad_weight, grad_bias = model.weight.grad[0].tolist(), model.bias.grad.item()
optimizer.step()

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
loaded = torch.load(buffer)
roundtrip = all(torch.equal(loaded[k], v) for k, v in model.state_dict().items())

print("RESULT " + json.dumps({
    "rank": rank,
    "world_size": world_size,
    "backend": dist.get_backend(),
    "grad_weight": grad_weight,
    "grad_bias": grad_bias,
    "weight": model.weight[0].tolist(),
    "bias": model.bias.item(),
    "profiled": sorted({e.key for e in prof.key_averages()}),
    "state_dict_roundtrip": roundtrip,
}), flush=True)
dist.destroy_process_group()
