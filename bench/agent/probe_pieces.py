"""What each piece of the Python probe's per-step work costs, timed in one process.

bench/agent's --python-probe compares whole runs with the probe on and off; on a 2-core
machine their step times spread by 5-10% a round, too much to see a 0.1 ms change. This
script times the pieces directly instead, in one process, each many times in alternation:

  PYTHONPATH=agent/python:$LOCKSTEP_PYTHON_TORCH python3 bench/agent/probe_pieces.py [--steps N] [--rounds R]

It builds the model of tests/agent/python/ddp_train.py under DDP (world size 1, Gloo, CPU),
then per round times N calls of each piece and prints the median per call, every round shown:
  set_runtime_stats   logger.set_runtime_stats_and_log(): what the probe calls at each step,
                      and what DDP calls at each synced forward at sample rate 1
  logging_data        logger._get_ddp_logging_data().ints_map: one read of DDP's figures
  probe_step          the probe's whole per-step work (_Probe._report_step: its DDP read,
                      formatting, one datagram to a socket nobody reads)
  train_step          one training step of the script (forward, backward, opt.step() with the
                      probe's hook registered): the yardstick the pieces are a share of
"""
import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def per_call(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    torch.manual_seed(0)
    x = torch.randn(16, 512)
    y = x[:, :8].sum(dim=1, keepdim=True)

    tmp = tempfile.mkdtemp(prefix="lockstep-probe-pieces-")
    path = os.path.join(tmp, "rank-0.sock")
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(path)
    sink.setblocking(False)

    from lockstep import _pytorch

    probe = _pytorch._Probe(path)
    probe.register_hooks(torch)
    model = DDP(nn.Sequential(nn.Linear(512, 2048, bias=False), nn.ReLU(), nn.Linear(2048, 1, bias=False)))
    opt = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9)

    def train_step():
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def drain():
        try:
            while True:
                sink.recv(65536)
        except BlockingIOError:
            pass

    for _ in range(20):  # DDP's bucket rebuild, the probe finding the DDP
        train_step()
    drain()
    logger = model.logger
    pieces = {
        "set_runtime_stats": logger.set_runtime_stats_and_log,
        "logging_data": lambda: logger._get_ddp_logging_data().ints_map,
        "probe_step": probe._report_step,
        "train_step": train_step,
    }
    print("bench/agent/probe_pieces.py: torch %s, %d calls of each piece a round, %d rounds; us per call"
          % (torch.__version__, args.steps, args.rounds))
    results = {k: [] for k in pieces}
    for r in range(1, args.rounds + 1):
        line = []
        for name, fn in pieces.items():
            n = args.steps if name != "train_step" else max(20, args.steps // 10)
            us = per_call(fn, n) * 1e6
            drain()
            results[name].append(us)
            line.append("%s %.1f" % (name, us))
        print("  round %d: %s" % (r, ", ".join(line)))
        sys.stdout.flush()
    step = statistics.median(results["train_step"])
    print("median over rounds (us per call, and as a share of the median training step of %.0f us):" % step)
    for name in pieces:
        m = statistics.median(results[name])
        print("  %-18s %8.1f us  %6.2f%%" % (name, m, 100 * m / step))
    probe.stop()
    dist.destroy_process_group()
    sink.close()
    for name in os.listdir(tmp):  # the socket and the probe's lock file beside it
        os.unlink(os.path.join(tmp, name))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
