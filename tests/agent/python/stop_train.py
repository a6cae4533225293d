"""A DDP program (Gloo) that checkpoints itself when the agent asks it to stop, as docs/agent.md
("Stopping on request") shows: after every step the ranks all-reduce lockstep.stopping(), and
once the sum is above 0 every rank stops after that step, rank 0 saving it.
tests/agent/probe_test.cpp runs it under lockstep-agent and sends the agent SIGTERM:

  python3 stop_train.py --out DIR [--never-ask]

It trains until stopped (at most 100,000 steps), touching DIR/step.<RANK> with its step count
after each one, and on a stop writes DIR/checkpoint.json ({"step": S}, rank 0), prints

  stop_train: rank R stopped after step S

and exits 143 (a stop, not a success). --never-ask never calls lockstep.stopping(): SIGTERM
must then end it at once, as it would without Lockstep.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import lockstep


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--never-ask", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = nn.parallel.DistributedDataParallel(nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(100000):
        x = torch.randn(8, 16)
        loss = nn.functional.mse_loss(model(x), x[:, :1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        with open(os.path.join(args.out, "step.%d" % rank), "w") as f:
            f.write("%d\n" % (step + 1))
        if args.never_ask:
            continue
        flag = torch.tensor([1.0 if lockstep.stopping() else 0.0])
        dist.all_reduce(flag)  # the same sum on every rank
        if flag.item() > 0:
            if rank == 0:
                with open(os.path.join(args.out, "checkpoint.json"), "w") as f:
                    json.dump({"step": step + 1}, f)
            dist.barrier()
            print("stop_train: rank %d stopped after step %d" % (rank, step + 1), flush=True)
            dist.destroy_process_group()
            sys.exit(143)


if __name__ == "__main__":
    main()
