"""What a 1-element all-reduce per step costs on Gloo: the stop vote's own collective where no
collective of the step can carry it (FSDP with --clip 0; Note [Stop vote] in trainer/stop.hpp).

    PYTHONPATH=<a torch tree> python3 bench/trainer/vote_allreduce.py [--ranks 2] [--rounds 5] [--iters 2000]

Starts --ranks processes on loopback; each round times --iters all-reduces of one float32 and
prints the mean per all-reduce on rank 0, every round.
"""

import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    vote = torch.zeros(1)
    for _ in range(100):  # warm-up: connections, allocations
        dist.all_reduce(vote)
    for r in range(args.rounds):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(vote)
        per = (time.perf_counter() - t0) / args.iters
        if rank == 0:
            print("round %d: %.1f us per 1-element all-reduce (%d ranks, Gloo, loopback)" % (r + 1, per * 1e6, args.ranks),
                  flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=2000)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.ranks)


if __name__ == "__main__":
    main()
