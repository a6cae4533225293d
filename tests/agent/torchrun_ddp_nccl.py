"""An unmodified torchrun-style PyTorch DDP program, for the agent's GPU tier.

Written as a user would write it for `torchrun --nproc-per-node N train.py`: it reads nothing
but torchrun's environment (init_process_group's env:// rendezvous, LOCAL_RANK for its GPU),
trains a small model with DistributedDataParallel over NCCL, and checks what it was given:

  python3 torchrun_ddp_nccl.py NNODES NPROC_PER_NODE

It prints one line "torchrun-ddp rank R/W ok: loss A -> B" and exits 0 when the environment
is torchrun's (every variable it sets for a worker, consistent with each other and with
NNODES and NPROC_PER_NODE), the all-reduce agrees, and the loss has fallen; else exit 1.
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def check_env(nnodes, nproc):
    e = os.environ
    problems = []
    need = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME",
            "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
            "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "GROUP_WORLD_SIZE"]
    for k in need:
        if k not in e:
            problems.append(f"{k} is not set")
    if problems:
        return problems
    rank, local, world = int(e["RANK"]), int(e["LOCAL_RANK"]), int(e["WORLD_SIZE"])
    group = int(e["GROUP_RANK"])
    expect = {
        "WORLD_SIZE": nnodes * nproc, "LOCAL_WORLD_SIZE": nproc, "GROUP_WORLD_SIZE": nnodes,
        "ROLE_WORLD_SIZE": nnodes * nproc, "RANK": group * nproc + local, "ROLE_RANK": rank,
    }
    for k, v in expect.items():
        if int(e[k]) != v:
            problems.append(f"{k}={e[k]}, torchrun would give {v}")
    if not 0 <= local < nproc:
        problems.append(f"LOCAL_RANK={local} outside [0, {nproc})")
    if world != dist.get_world_size() or rank != dist.get_rank():
        problems.append("RANK/WORLD_SIZE disagree with the process group")
    return problems


def main():
    nnodes, nproc = int(sys.argv[1]), int(sys.argv[2])
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    problems = check_env(nnodes, nproc)

    # The collective itself: the sum of ranks.
    t = torch.tensor([float(rank)], device="cuda")
    dist.all_reduce(t)
    if t.item() != world * (world - 1) / 2:
        problems.append(f"all_reduce of ranks gave {t.item()}")

    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 1)).cuda(), device_ids=[local])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator(device="cuda").manual_seed(1 + rank)
    w = torch.randn(64, 1, device="cuda", generator=torch.Generator(device="cuda").manual_seed(7))
    first = last = None
    for step in range(60):
        x = torch.randn(128, 64, device="cuda", generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(model(x).float(), x @ w)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        first = loss.item() if first is None else first
        last = loss.item()
    if not last < first / 4:
        problems.append(f"loss did not fall: {first:.4f} -> {last:.4f}")
    dist.destroy_process_group()
    if problems:
        print(f"torchrun-ddp rank {rank}/{world} FAILED: " + "; ".join(problems), flush=True)
        return 1
    print(f"torchrun-ddp rank {rank}/{world} ok: loss {first:.4f} -> {last:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
