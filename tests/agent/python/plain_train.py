"""A plain PyTorch training loop: one process, no process group, no DDP, nothing of Lockstep
unless asked. tests/agent/probe_test.cpp runs it under lockstep-agent for the probe's edge
cases:

  python3 plain_train.py --out DIR [--steps N] [--report] [--break-probe-after K] [--two-optimizers]

--steps N              optimizer steps (0: forward passes only, the program never steps)
--report               call lockstep.report(loss=..., tokens=...) for every micro-batch
--break-probe-after K  after K steps, make the probe's own code raise (a stand-in for a bug
                       in it): the probe must disable itself and the result stay the same
--two-optimizers       one optimizer per layer, both stepping every step, and both replaced by
                       new ones halfway (as a program that changes phase would): still one
                       step per step for the probe

Two micro-batches per step (gradient accumulation), SGD, a fixed seed and one thread, so
the result (a checksum of the final parameters) is the same on every run. It writes its own
count, the figures it reported and the checksum to DIR/plain-<RANK>.json (RANK as torchrun
sets it, else 0) and prints one line:

  plain_train: N optimizer steps, checksum C
"""
import argparse
import json
import os

import torch
import torch.nn as nn


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--break-probe-after", type=int, default=-1)
    parser.add_argument("--two-optimizers", action="store_true")
    args = parser.parse_args()
    if args.report:
        import lockstep

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
    def optimizers():
        if args.two_optimizers:
            return [torch.optim.SGD(model[0].parameters(), lr=0.05), torch.optim.SGD(model[2].parameters(), lr=0.05)]
        return [torch.optim.SGD(model.parameters(), lr=0.05)]

    opts = optimizers()
    reported = []  # per step: [mean loss, tokens]
    steps = 0
    if args.steps == 0:
        with torch.no_grad():
            for _ in range(4):
                model(torch.randn(8, 32))
    for step in range(args.steps):
        losses, tokens = [], 0
        for micro in range(2):
            x = torch.randn(8, 32)
            loss = nn.functional.mse_loss(model(x), x[:, :1]) / 2
            loss.backward()
            value = loss.item() * 2
            losses.append(value)
            tokens += x.shape[0]
            if args.report:
                lockstep.report(loss=value, tokens=x.shape[0])
        for opt in opts:
            opt.step()
            opt.zero_grad()
        steps += 1
        if args.two_optimizers and steps == args.steps // 2:
            opts = optimizers()
        reported.append([sum(losses) / len(losses), tokens])
        if steps == args.break_probe_after:
            try:
                from lockstep import _pytorch
            except ImportError:  # no probe here (switched off): nothing to break
                _pytorch = None
            if _pytorch is not None:
                def broken(*a, **k):
                    raise RuntimeError("a bug planted by plain_train.py")

                _pytorch._Probe._report_step = broken
    checksum = float(sum(p.double().sum() for p in model.parameters()))
    with open(os.path.join(args.out, "plain-%s.json" % os.environ.get("RANK", "0")), "w") as f:
        json.dump({"steps": steps, "reported": reported, "checksum": checksum}, f)
    print("plain_train: %d optimizer steps, checksum %.17g" % (steps, checksum), flush=True)


if __name__ == "__main__":
    main()
