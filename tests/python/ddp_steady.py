# A plain torchrun-style DDP program on Gloo, with nothing of Lockstep in it, that trains at a
# steady pace for a given time: a Linear(512, H) -> ReLU -> Linear(H, 1) regression on random
# data, one optimizer step per batch, every rank alike. cli_test runs it under `lockstep run`
# (the agent's Python probe gives its figures) with one node slowed through a cgroup, and again
# healthy, to see the straggler named, or nobody (#42).
#
#   python3 ddp_steady.py --seconds S [--batch B] [--hidden H] [--check-every K]
#
# The ranks stop together: every K steps rank 0 broadcasts whether S seconds have passed since
# the first step (a rank that stopped alone would leave its peer in a collective). Each rank
# prints one line at the end:
#
#   ddp_steady rank R/W: N optimizer steps in T s, loss A -> B
import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--check-every", type=int, default=5)
    args = parser.parse_args()

    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    model = DDP(nn.Sequential(nn.Linear(512, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)

    steps, started, first_loss, loss = 0, None, None, None
    stop = torch.zeros(1)
    while True:
        x = torch.randn(args.batch, 512)
        y = x[:, :8].sum(dim=1, keepdim=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps += 1
        started = started or time.perf_counter()
        first_loss = first_loss if first_loss is not None else loss.item()
        if steps % args.check_every == 0:
            stop.fill_(1.0 if rank == 0 and time.perf_counter() - started >= args.seconds else 0.0)
            dist.broadcast(stop, src=0)
            if stop.item() > 0:
                break

    print("ddp_steady rank %d/%d: %d optimizer steps in %.1f s, loss %.4f -> %.4f"
          % (rank, world, steps, time.perf_counter() - started, first_loss, loss.item()), flush=True)
    dist.barrier()  # every rank done before any tears Gloo down
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
