"""A textbook torchrun-style DDP training script, with nothing of Lockstep in it.

Written as the PyTorch tutorials write one for `torchrun --nproc-per-node N ddp_train.py`:
the process group from torchrun's environment (Gloo), a DistributedSampler with set_epoch,
gradient accumulation over 2 micro-batches with no_sync() on all but the last, and rank 0
saving a checkpoint at the end. tests/agent/probe_test.cpp runs it under lockstep-agent and
checks the probe's figures against what this script measures itself:

  python3 ddp_train.py --out DIR [--epochs E] [--accum A] [--samples N] [--no-sync-off]
                       [--slow-every K --slow-s S] [--keep-model]

Besides training it times, with time.perf_counter, each opt.step() call (the moment it
returns is the probe's step boundary, and the probe's own work runs inside it; also its CPU
time, time.thread_time) and each
synced backward (DDP's gradient all-reduce runs inside it), and after training the
all-reduce of a tensor of the same bytes as the gradients, after a barrier (an independent
figure for communication).
Each rank writes them to DIR/rank-R.json and prints one line:

  ddp_train rank R/W: S optimizer steps, loss A -> B
"""
import argparse
import contextlib
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


_KEPT = []  # --keep-model


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--no-sync-off", action="store_true",
                        help="accumulate without no_sync(): every micro-batch all-reduces")
    parser.add_argument("--slow-every", type=int, default=0,
                        help="every K-th step also sleeps --slow-s before its opt.step() (a slow step)")
    parser.add_argument("--slow-s", type=float, default=0.15)
    parser.add_argument("--keep-model", action="store_true",
                        help="keep the DDP model alive until the interpreter exits (a module global)")
    args = parser.parse_args()

    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    inputs = torch.randn(args.samples, 512)
    targets = inputs[:, :8].sum(dim=1, keepdim=True)
    data = TensorDataset(inputs, targets)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler)

    # One 4 MiB gradient bucket: the weights are larger than DDP's 1 MiB first bucket, so
    # each step's all-reduce is one collective of every gradient byte.
    model = DDP(nn.Sequential(nn.Linear(512, 2048, bias=False), nn.ReLU(), nn.Linear(2048, 1, bias=False)))
    if args.keep_model:
        _KEPT.append(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9)

    steps = 0
    step_ends = []       # perf_counter when each opt.step() returned
    step_calls = []      # how long each opt.step() took: wall time
    step_cpu = []        # and this thread's CPU time (what a busy machine's preemption leaves out)
    step_cpu_ends = []   # this thread's CPU clock (time.thread_time) when each opt.step() returned
    synced_backward = []  # [start, end] of each step's synced backward
    first_loss = last_loss = None
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            last_micro_batch = (i + 1) % args.accum == 0
            sync = last_micro_batch or args.no_sync_off
            with contextlib.nullcontext() if sync else model.no_sync():
                loss = nn.functional.mse_loss(model(x), y) / args.accum
                started = time.perf_counter()
                loss.backward()
                ended = time.perf_counter()
            if last_micro_batch:
                synced_backward.append([started, ended])
                if args.slow_every and (steps + 1) % args.slow_every == 0:
                    time.sleep(args.slow_s)
                started, cpu = time.perf_counter(), time.thread_time()
                opt.step()
                ended = time.perf_counter()
                cpu_end = time.thread_time()
                step_cpu.append(cpu_end - cpu)
                step_cpu_ends.append(cpu_end)
                step_ends.append(ended)
                step_calls.append(ended - started)
                opt.zero_grad(set_to_none=True)
                steps += 1
                value = loss.item() * args.accum
                first_loss = value if first_loss is None else first_loss
                last_loss = value

    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(), "steps": steps},
                   os.path.join(args.out, "checkpoint.pt"))

    # The independent figure: all-reduce a tensor of the gradients' bytes, as DDP's bucket is.
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    flat = torch.zeros(grad_bytes // 4)
    allreduce_s = []
    for _ in range(10):
        dist.barrier()
        started = time.perf_counter()
        dist.all_reduce(flat)
        allreduce_s.append(time.perf_counter() - started)

    with open(os.path.join(args.out, "rank-%d.json" % rank), "w") as f:
        json.dump({"rank": rank, "world": world, "steps": steps, "step_ends": step_ends, "step_calls": step_calls,
                   "step_cpu": step_cpu, "step_cpu_ends": step_cpu_ends,
                   "synced_backward": synced_backward, "allreduce_s": allreduce_s, "grad_bytes": grad_bytes,
                   "first_loss": first_loss, "last_loss": last_loss}, f)
    print("ddp_train rank %d/%d: %d optimizer steps, loss %.4f -> %.4f" % (rank, world, steps, first_loss, last_loss),
          flush=True)
    # Every rank done before any tears Gloo down: a rank that left first has made a peer still in
    # destroy_process_group abort ("terminate called without an active exception"), probe or none.
    # Even after it, Gloo's threads can abort the exit; under the agent the probe waits them out
    # (Note [Gloo's exit race] in `agent/python/lockstep/_exit_wait.py`).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
