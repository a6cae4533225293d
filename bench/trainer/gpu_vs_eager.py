#!/usr/bin/env python3
"""lockstep-trainer against the same GPT in PyTorch eager, on the same GPU, in one script.

Issue #5's GPU benchmark: `gpt2-124m` with bf16 autocast, tokens/s and MFU (model FLOPs per
second against the GPU's dense bf16 peak) of

  * lockstep-trainer (LibTorch, C++): one rank with a real NCCL process group, so its step
    includes DDP's bucketed all-reduces, fused AdamW and gradient clipping;
  * the same model (the same layers, initialisation, loss and optimizer settings) written in
    Python and run by PyTorch eager, with torch.optim.AdamW as PyTorch picks it by default
    (foreach) and with fused=True; the better of the two is the baseline.

Rounds alternate between the two (trainer, eager, trainer, ...) and each figure is the median
over rounds of the median steady-state step time. Run it through bench/trainer/gpu.sh, which
builds the trainer against the installed CUDA PyTorch first. `--device cpu --model tiny` runs
the whole script without a GPU (no MFU then: no peak to compare with), to check the script.
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Dense bf16 tensor-core peaks (no sparsity), TFLOP/s, from NVIDIA's data sheets; the first
# name fragment that matches torch.cuda.get_device_name() wins. --peak-tflops overrides.
PEAKS = [("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("GH200", 989.4), ("H200", 989.4), ("H100", 989.4),
         ("H800", 989.4), ("B200", 2250.0), ("B100", 1750.0), ("A100", 312.0), ("A800", 312.0),
         ("L40S", 362.1), ("L4", 121.0), ("A10G", 70.0)]

PRESETS = {  # as trainer/model.cpp GptConfig::preset
    "tiny": dict(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=256),
    "gpt2-124m": dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257),
}


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["n_embd"]
        self.n_head = c["n_head"]
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(B, T, C)
        h = x + self.c_proj(y)
        return h + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(h)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wte = nn.Embedding(c["vocab_size"], c["n_embd"])
        self.wpe = nn.Embedding(c["block_size"], c["n_embd"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layer"]))
        self.ln_f = nn.LayerNorm(c["n_embd"])
        with torch.no_grad():  # GPT-2 initialisation, as the trainer's
            for name, p in self.named_parameters():
                if "bias" in name:
                    p.zero_()
                elif "ln_" in name:
                    p.fill_(1.0)
                else:
                    std = 0.02 / (math.sqrt(2 * c["n_layer"]) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 1)
                    p.normal_(0.0, std)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


def flops_per_token(c, n_params):
    """6 x (parameters - position table) + attention's 12 x layers x context x width (PaLM's
    count, appendix B; nanoGPT's estimate_mfu): the position embedding is a lookup, the tied
    embedding counts once, as the output projection. The trainer's step datagrams report the
    same count (`flops`, trainer/train.cpp), which the dashboard's MFU divides: docs/trainer.md."""
    return 6 * (n_params - c["block_size"] * c["n_embd"]) + 12 * c["n_layer"] * c["block_size"] * c["n_embd"]


def eager_round(c, args, device, fused):
    torch.manual_seed(1337)
    model = Gpt(c).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True if fused else None)
    bf16 = device.type == "cuda"
    g = torch.Generator().manual_seed(0)
    times = []
    for step in range(args.steps):
        x = torch.randint(0, c["vocab_size"], (args.batch_size, c["block_size"]), generator=g)
        y = torch.roll(x, -1, 1)
        t0 = time.perf_counter()
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss.item()  # a training loop reads its loss each step, as the trainer does
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= 3:
            times.append(time.perf_counter() - t0)
    n_params = sum(p.numel() for p in model.parameters())
    del model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return statistics.median(times), n_params


def trainer_round(args, device):
    with tempfile.TemporaryDirectory() as tmp:
        stats = os.path.join(tmp, "stats")
        cmd = [args.trainer, "--model", args.model, "--device", device.type, "--steps", str(args.steps),
               "--batch-size", str(args.batch_size), "--log-every", str(max(1, args.steps // 4)),
               "--stats-file", stats, "--lr", "1e-4", "--warmup-steps", "0"]
        if device.type == "cuda":
            cmd += ["--backend", "nccl", "--precision", "bf16"]
        env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.exit(f"lockstep-trainer failed ({r.returncode}):\n{r.stdout}")
        values = dict(line.split() for line in open(stats) if line.strip())
        return float(values["step_s_median"]), r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", required=True, help="the lockstep-trainer binary")
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--batch-size", type=int, default=16, help="sequences per step (default 16)")
    ap.add_argument("--steps", type=int, default=40, help="steps per round; the first 3 are not timed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--peak-tflops", type=float, default=0, help="dense bf16 peak (default: from the GPU's name)")
    args = ap.parse_args()
    if args.steps < 8:
        ap.error("--steps must be at least 8 (3 warm-up steps are not timed)")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("SKIPPED: no GPU: torch.cuda.is_available() is false (run with --device cpu to check the script)")
        return 0
    device = torch.device(args.device)
    c = PRESETS[args.model]
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    peak = (args.peak_tflops or next((p for k, p in PEAKS if k in name), 0.0)) if device.type == "cuda" else 0.0
    tokens = args.batch_size * c["block_size"]
    print(f"bench/trainer gpu: {args.model}, batch {args.batch_size} x {c['block_size']} tokens, "
          f"{'bf16 autocast' if device.type == 'cuda' else 'fp32'}, {name}"
          + (f" (dense bf16 peak {peak:.0f} TFLOP/s)" if peak else " (no known peak: MFU not computed)")
          + f", torch {torch.__version__}, {args.rounds} rounds x {args.steps} steps", flush=True)
    runs = {"lockstep-trainer": [], "eager, AdamW default (foreach)": [], "eager, AdamW fused": []}
    n_params = 0
    for r in range(args.rounds):
        step_s, out = trainer_round(args, device)
        runs["lockstep-trainer"].append(step_s)
        if r == 0:
            print("  " + "\n  ".join(l for l in out.splitlines() if l.startswith("lockstep-trainer:")), flush=True)
        for key, fused in (("eager, AdamW default (foreach)", False), ("eager, AdamW fused", True)):
            s, n_params = eager_round(c, args, device, fused)
            runs[key].append(s)
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1] * 1e3:.1f} ms/step" for k, v in runs.items()), flush=True)
    fpt = flops_per_token(c, n_params)
    print(f"\nresults (medians of {args.rounds} rounds; {n_params / 1e6:.1f}M parameters, {fpt / 1e9:.3f} GFLOP per token)")
    rate = {}
    for k, v in runs.items():
        s = statistics.median(v)
        rate[k] = tokens / s
        mfu = f", MFU {100 * rate[k] * fpt / (peak * 1e12):.1f}%" if peak else ""
        print(f"  {k:32s} {s * 1e3:8.2f} ms/step  {rate[k]:10.0f} tok/s{mfu}")
    best = max(("eager, AdamW default (foreach)", "eager, AdamW fused"), key=lambda k: rate[k])
    ratio = rate["lockstep-trainer"] / rate[best]
    print(f"  tokens/s, lockstep-trainer / best eager ({best}): {ratio:.3f} (target >= 1.0: {'met' if ratio >= 1 else 'NOT met'})")
    if peak:
        mfu = 100 * rate["lockstep-trainer"] * fpt / (peak * 1e12)
        print(f"  lockstep-trainer MFU: {mfu:.1f}% (target >= 40%: {'met' if mfu >= 40 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
