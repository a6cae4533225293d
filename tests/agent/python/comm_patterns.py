"""Training loops as users write them, one after another in one program, each timing its own
communication so that the probe's figures can be checked against it.

tests/agent/probe_test.cpp (ProbeTorch.EveryPatternReportsItsCommunicationOnEveryStep) runs it
under lockstep-agent, 2 agents x 2 workers on Gloo, with nothing of Lockstep in it:

  python3 comm_patterns.py --out DIR [--only NAME[,NAME...]] [--list]

Each pattern builds its own model, wrapper (DDP or FSDP2) and optimizer inside a function, so
they are gone when the next begins, and makes a few optimizer steps:

  tutorial        the textbook loop, literally: DistributedSampler with set_epoch, `loss =
                  model(x) / 4; loss.backward(); if (i + 1) % 4 == 0: optimizer.step();
                  optimizer.zero_grad()`, no no_sync(): every micro-batch all-reduces
  accum1          no accumulation: one synced backward a step
  no_sync2        accumulation over 2 with no_sync() on the first: one synced backward a step
  buckets8        accumulation over 8 without no_sync(), a deeper model in 10 KB buckets
                  (three all-reduces a backward)
  accum32         accumulation over 32 without no_sync()
  unused4         find_unused_parameters=True, a branch used every other micro-batch,
                  accumulation over 4 with no_sync() on all but the last
  static4         static_graph=True, accumulation over 4 without no_sync()
  eval_no_grad    an evaluation forward under torch.no_grad() (model.eval()) before every
                  second step, accumulation over 2 without no_sync()
  grad_no_bwd     each step also runs a forward with gradients whose output is never
                  backwarded (a metric computed without no_grad()), accumulation over 2
  slow4           accumulation over 4 with no_sync(), every second step 0.3 s slower (a step
                  of 0.25 s or more is read at its end, a faster one at the next step)
  fsdp2           FSDP2 (fully_shard per layer), accumulation over 2

What it measures itself, per optimizer step, in windows: each backward that reduces (DDP:
outside no_sync(); its all-reduce runs inside it) or each micro-batch's forward and backward
(FSDP2: its all-gathers run in both, its reduce-scatters in the backward). Of each window, its
wall time (time.perf_counter), and the collectives torch.profiler saw in it: each from its
launch on this thread (the `c10d::` op) to the end of Gloo's run of it (the `gloo:` event on
Gloo's thread); for DDP the span of its buckets' all-reduces, from the first launch to the last
end (DDP's own figure is a span: from its first bucket's launch to the end of its wait for the
last), for FSDP2 their sum.
The profiler runs around each pattern's training, so its cost is in every figure alike. Each
rank writes DIR/patterns-R.json:

  {"rank", "world", "patterns": [{"name", "steps", "wall": [[window's wall time, ...] per step],
    "profiled": [[profiler's figure per window, ...] per step], "reduced": [windows per step],
    "grad_bytes", "bytes": {op: per step} (FSDP2), "checksum": the trained parameters' sum}]}
"""
import argparse
import contextlib
import gc
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

BATCH = 16


def mlp(extra_branch=False, deep=False):
    """512 -> 768 -> 1, no bias: 1.6 MB of float32 gradients, in two of DDP's buckets (its first
    bucket holds 1 MB at most: the small last layer's weight, then the large one's). deep: four
    layers with biases, eight parameters of 1 MB in all."""
    torch.manual_seed(0)
    if deep:
        return nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256),
                             nn.ReLU(), nn.Linear(256, 1))
    model = nn.Sequential(nn.Linear(512, 768, bias=False), nn.ReLU(), nn.Linear(768, 1, bias=False))
    if not extra_branch:
        return model

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = model
            self.branch = nn.Linear(512, 1, bias=False)  # used on odd micro-batches only
            self.use_branch = False

        def forward(self, x):
            out = self.trunk(x)
            return out + self.branch(x) if self.use_branch else out

    return Branchy()


def data(samples, seed=0):
    torch.manual_seed(seed)
    inputs = torch.randn(samples, 512)
    return TensorDataset(inputs, inputs[:, :8].sum(dim=1, keepdim=True))


def grad_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


WINDOW = "comm_patterns.window"


class Record:
    """One pattern's own figures."""

    def __init__(self, name):
        self.name = name
        self.wall = []  # per step: the wall time of each window
        self.reduced = []
        self.step_wall = []

    @contextlib.contextmanager
    def window(self):
        with record_function(WINDOW):
            started = time.perf_counter()
            yield
            self.step_wall.append(time.perf_counter() - started)

    def backward(self, loss, reduces):
        if not reduces:
            loss.backward()
            return
        with self.window():
            loss.backward()

    def step(self, opt):
        opt.step()
        opt.zero_grad(set_to_none=True)
        self.wall.append(self.step_wall)
        self.reduced.append(len(self.step_wall))
        self.step_wall = []

    def result(self, events, span, skip=None, **more):
        """The profiler's figure for each window, grouped by step as the windows were."""
        figures = per_window(events, span, skip)
        if len(figures) != sum(self.reduced):
            raise RuntimeError("%s: %d windows timed, %d seen by the profiler" % (self.name, sum(self.reduced), len(figures)))
        profiled = []
        for n in self.reduced:
            profiled.append(figures[:n])
            figures = figures[n:]
        out = {"name": self.name, "steps": len(self.wall), "wall": self.wall, "profiled": profiled,
               "reduced": self.reduced}
        out.update(more)
        return out


def per_window(events, span, skip=None):
    """Per WINDOW range, in order: the profiler's figure of the collectives launched in it, each from its
    c10d:: op's start on this thread to the end of the gloo: event that ran it, as a span (span) or
    a sum. The n-th launch is the n-th run to start: a process group's threads take its
    collectives from one queue in order (their ends need not be in order: two threads). skip: the
    element count of a run to leave out (DDP's map of used parameters, one int each, which
    find_unused_parameters and static_graph's first iteration all-reduce beside the buckets; DDP's
    timer spans the buckets only)."""
    windows = sorted((e.time_range.start, e.time_range.end) for e in events if e.name == WINDOW)
    launches = sorted(e.time_range.start for e in events if e.name.startswith("c10d::") and "barrier" not in e.name)
    runs = [(end, numel) for _, end, numel in sorted(
        (e.time_range.start, e.time_range.end, sum(math.prod(shape) for shape in e.input_shapes if shape))
        for e in events if e.name.startswith("gloo:") and "barrier" not in e.name)]
    if len(launches) != len(runs):
        raise RuntimeError("the profiler saw %d collectives launched and %d run" % (len(launches), len(runs)))
    out = []
    for start, end in windows:
        pairs = [(a, b) for a, (b, numel) in zip(launches, runs) if start <= a <= end and numel != skip]
        if not pairs:
            out.append(0.0)
        elif span:
            out.append((max(b for _, b in pairs) - min(a for a, _ in pairs)) / 1e6)
        else:
            out.append(sum(b - a for a, b in pairs) / 1e6)
    return out


def tutorial(rec):
    # As the tutorials write it (besides the timing of the backward the test needs).
    model = DDP(mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9)
    dataset = data(768)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            loss = nn.functional.mse_loss(model(x), y) / 4
            rec.backward(loss, True)
            if (i + 1) % 4 == 0:
                rec.step(optimizer)
    return model


def accumulate(rec, steps, accum, use_no_sync, model=None, before_micro_batch=None, before_step=None, **ddp_args):
    """`steps` optimizer steps of `accum` micro-batches each, no_sync() on all but the last or none;
    before_micro_batch(model, i) and before_step() run where their names say."""
    model = model or DDP(mlp(), **ddp_args)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.002, momentum=0.9)
    loader = DataLoader(data(BATCH * accum * steps, seed=dist.get_rank()), batch_size=BATCH)
    for i, (x, y) in enumerate(loader):
        if before_micro_batch is not None:
            before_micro_batch(model, i)
        last = (i + 1) % accum == 0
        sync = last or not use_no_sync
        with contextlib.nullcontext() if sync else model.no_sync():
            loss = nn.functional.mse_loss(model(x), y) / accum
            rec.backward(loss, sync)
        if last:
            if before_step is not None:
                before_step()
            rec.step(optimizer)
    return model


def unused4(rec):
    def branch_every_other(model, i):
        model.module.use_branch = i % 2 == 1

    model = DDP(mlp(extra_branch=True), find_unused_parameters=True)
    return accumulate(rec, 3, 4, True, model=model, before_micro_batch=branch_every_other)


def eval_no_grad(rec):
    held_out = torch.randn(BATCH, 512)

    def evaluate_every_second_step(model, i):
        if i % 4 == 0:
            model.eval()
            with torch.no_grad():
                model(held_out)
            model.train()

    return accumulate(rec, 4, 2, False, before_micro_batch=evaluate_every_second_step)


def grad_no_bwd(rec):
    probe_x = torch.randn(BATCH, 512)

    def forward_without_backward(model, i):
        if i % 2 == 0:
            model(probe_x).mean().item()  # a forward with gradients, never backwarded

    return accumulate(rec, 4, 2, False, before_micro_batch=forward_without_backward)


def slow4(rec):
    def every_second_step_slower():
        if len(rec.wall) % 2 == 1:
            time.sleep(0.3)

    return accumulate(rec, 4, 4, True, before_step=every_second_step_slower)


def fsdp2(rec):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    # Every first dimension divisible by the world size (4): no padding, so the collectives'
    # bytes are the parameters' exactly.
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 4))
    layers = [m for m in model if isinstance(m, nn.Linear)]
    sizes = [sum(p.numel() * p.element_size() for p in layer.parameters()) for layer in layers]
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.002)
    loader = DataLoader(data(BATCH * 2 * 4, seed=dist.get_rank()), batch_size=BATCH)
    for i, (x, y) in enumerate(loader):
        with rec.window():
            loss = nn.functional.mse_loss(model(x)[:, :1], y) / 2
            loss.backward()
        if (i + 1) % 2 == 0:
            rec.step(optimizer)
    # Per micro-batch, each layer's parameters all-gathered twice (forward, and backward:
    # resharded after forward) and its gradients reduce-scattered once; 2 micro-batches a step.
    return model, {"allgather": 2 * sum(sizes) * 2, "reduce_scatter": sum(sizes) * 2}, sum(sizes)


def checksum(model):
    """The trained parameters, summed in float64 (this rank's shards for FSDP2): equal bit for bit
    whether the probe ran or not."""
    total = 0.0
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += float(local.detach().double().sum())
    return total


PATTERNS = {
    "tutorial": tutorial,
    "accum1": lambda rec: accumulate(rec, 6, 1, True),
    "no_sync2": lambda rec: accumulate(rec, 6, 2, True),
    "buckets8": lambda rec: accumulate(rec, 2, 8, False, model=DDP(mlp(deep=True), bucket_cap_mb=0.01)),
    "accum32": lambda rec: accumulate(rec, 2, 32, False),
    "unused4": unused4,
    "static4": lambda rec: accumulate(rec, 3, 4, False, static_graph=True),
    "eval_no_grad": eval_no_grad,
    "grad_no_bwd": grad_no_bwd,
    "slow4": slow4,
    "fsdp2": fsdp2,
}


def run(name):
    rec = Record(name)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        result = PATTERNS[name](rec)
        # Gloo's thread records a collective's end after the waiting thread has gone on: a
        # barrier and a moment, so that the profiler has the last one's before it stops.
        dist.barrier()
        time.sleep(0.05)
    events = prof.events()
    if isinstance(result, tuple):  # FSDP2: the model, its bytes per step, its parameters' bytes
        total, nbytes, size = checksum(result[0]), result[1], result[2]
        del result
        gc.collect()
        return rec.result(events, False, grad_bytes=size, bytes=nbytes, checksum=total)
    nbytes, total, parameters = grad_bytes(result), checksum(result), len(list(result.parameters()))
    del result
    gc.collect()  # the model, its DDP and optimizer gone before the next pattern's
    return rec.result(events, True, skip=parameters, grad_bytes=nbytes, checksum=total)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list:
        print(" ".join(PATTERNS))
        return
    names = [n for n in args.only.split(",") if n] or list(PATTERNS)
    for n in names:
        if n not in PATTERNS:
            parser.error("--only: unknown pattern %r (known: %s)" % (n, ", ".join(PATTERNS)))

    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    results = []
    for name in names:
        started = time.perf_counter()
        results.append(run(name))
        if rank == 0:
            print("comm_patterns: %s, %d steps, %.1f s" % (name, results[-1]["steps"], time.perf_counter() - started),
                  flush=True)
    with open(os.path.join(args.out, "patterns-%d.json" % rank), "w") as f:
        json.dump({"rank": rank, "world": world, "patterns": results}, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
