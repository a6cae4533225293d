#!/usr/bin/env python3
"""lockstep-trainer against the same GPT in PyTorch eager, on the same GPU, in one script.

Issue #27's GPU benchmark. Both sides do the same work and are timed the same way:

  * the same model: the same layers, initialisation, vocabulary (padded to --vocab-multiple
    on both), bf16 autocast, the same loss (cross-entropy of the logits copied to fp32),
    gradient clipping and AdamW settings;
  * the same data path: windows of one token file (uint16, nanoGPT's .bin) made here; the
    trainer reads it with --data, eager with numpy; each batch is copied to the GPU from
    pinned memory without blocking, the next one made while the GPU runs the step;
  * the same clock: the host's wall time over the steady-state steps (after 3 untimed ones),
    each step ending when the GPU has finished it (the trainer's `wall_s_per_step`). The
    trainer's own per-step CUDA-event figure is printed beside it.

Trainer configurations (--configs) are rows of flags, each adding one lever to the one
before, from the trainer as it was (--sync-every-step --ddp-at-one-rank, no padding) to all levers; the eager baselines are torch.optim.AdamW
default (foreach) and fused=True at the same settings. Rounds alternate between all of them,
and every round is printed. FLOPs are counted two ways: ours (6 x (parameters - position
table - padding) + 12 x layers x context x width; docs/trainer.md) and llm.c's
(6 x parameters + 6 x layers x width x context, its parameters counting the padded vocabulary
and the position table). `--device cpu --model tiny` runs the whole script without a GPU.
"""
import argparse
import array
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
    "gpt2-1558m": dict(n_layer=48, n_head=25, n_embd=1600, block_size=1024, vocab_size=50257),
}

# One lever at a time, each row adding one to the row before (Note [Step speed] in
# trainer/train.cpp). "as before" is the trainer of the first GPU run (2026-11-22).
LEVERS = [
    ("as before", ["--sync-every-step", "--ddp-at-one-rank"], 1),
    ("+ vocabulary padded", ["--sync-every-step", "--ddp-at-one-rank"], 64),
    ("+ no DDP at one rank", ["--sync-every-step"], 64),
    ("+ no sync, prefetch", [], 64),
    ("+ attention cudnn", ["--attention", "cudnn"], 64),
    ("+ attention flash", ["--attention", "flash"], 64),
    ("+ CUDA graph", ["--cuda-graph"], 64),  # Note [CUDA graph step]; after the auto-attention row
]


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


def padded(c, multiple):
    c = dict(c)
    c["vocab_size"] = (c["vocab_size"] + multiple - 1) // multiple * multiple
    return c


def parameters(c):
    """Exact parameter count of the model above (tied head counted once)."""
    L, C, V, T = c["n_layer"], c["n_embd"], c["vocab_size"], c["block_size"]
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


def flops_ours(c, vocab):
    """6 x (parameters - position table - padding rows) + 12 x L x T x C per token (PaLM's
    appendix B, nanoGPT's estimate_mfu; the trainer's `flops`, docs/trainer.md)."""
    L, C, T = c["n_layer"], c["n_embd"], c["block_size"]
    useful = parameters(c) - T * C - (c["vocab_size"] - vocab) * C
    return 6 * useful + 12 * L * T * C


def flops_llmc(c):
    """llm.c's count (train_gpt2.cu): 6 x N + 6 x L x C x T per token, N its num_parameters,
    which holds the padded vocabulary and the position table; causal attention counted half."""
    L, C, T = c["n_layer"], c["n_embd"], c["block_size"]
    return 6 * parameters(c) + 6 * L * C * T


def make_token_file(path, vocab, tokens, seed=0):
    ids = torch.randint(0, vocab, (tokens,), generator=torch.Generator().manual_seed(seed))
    with open(path, "wb") as f:
        array.array("H", ids.tolist()).tofile(f)  # little-endian uint16 on x86-64, nanoGPT's .bin


def read_token_file(path):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.int16).to(torch.int64) & 0xFFFF


def lm_loss(logits, y):
    """As the trainer's lm_loss: the bf16 logits copied to fp32, then cross-entropy."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1))


def kind_of(n):
    """The kind of a kernel or operator name: trainer/profile.cpp's StepProfile::kind_of."""
    has = lambda *parts: any(p in n for p in parts)
    if has("nccl", "Nccl"): return "communication"
    if has("Adam", "adam"): return "optimizer"
    if has("Memcpy", "Memset", "memcpy", "aten::copy_", "aten::to"): return "copies"
    if has("flash", "fmha", "sdpa", "attention", "Attention"): return "attention"
    if has("gemm", "nvjet", "xmma", "cutlass", "aten::mm", "aten::addmm", "aten::bmm"): return "matrix products"
    if has("SoftMax", "softmax", "nll_loss", "cross_entropy"): return "loss (vocabulary)"
    if has("layer_norm", "LayerNorm", "GammaBeta"): return "LayerNorm"
    if has("Gelu", "gelu"): return "GELU"
    if has("elementwise", "reduce", "multi_tensor_apply", "aten::"): return "other elementwise"
    return "other"


def print_profile(prof, step_s, out=sys.stdout):
    """Eager's step, summed as the trainer's --profile-step summary (Note [Step profile])."""
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]  # torch.profiler's
    by_kind, by_name, spans = {}, {}, []
    for e in kernels:
        d = e.time_range.elapsed_us() * 1e-6
        by_kind[kind_of(e.name)] = by_kind.get(kind_of(e.name), 0) + d
        t, n = by_name.get(e.name, (0, 0))
        by_name[e.name] = (t + d, n + 1)
        spans.append((e.time_range.start, e.time_range.end))
    spans.sort()
    busy, cur = 0.0, None
    for b, e in spans:
        if cur is None or b > cur[1]:
            if cur: busy += (cur[1] - cur[0]) * 1e-6
            cur = [b, e]
        else:
            cur[1] = max(cur[1], e)
    if cur: busy += (cur[1] - cur[0]) * 1e-6
    total = sum(by_kind.values())
    pct = lambda x: f"{100 * x / step_s:.1f}%"
    print(f"eager: profile of one step: step {step_s * 1e3:.2f} ms, GPU kernels {total * 1e3:.2f} ms in {len(spans)} events, "
          f"device busy {busy * 1e3:.2f} ms ({pct(busy)}), idle {max(0, step_s - busy) * 1e3:.2f} ms\n  by kind:", file=out)
    for k, t in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"    {k:20s}{t * 1e3:9.2f} ms {pct(t):>7s}", file=out)
    print("  top 15 by time:", file=out)
    for name, (t, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:15]:
        print(f"    {t * 1e3:9.2f} ms {pct(t):>7s}  x{n:<4d} {name[:90]}  [{kind_of(name)}]", file=out)


def eager_round(c, args, device, fused, tokens_path, profile_step=0):
    torch.manual_seed(1337)
    model = Gpt(c).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True if fused else None)
    cuda = device.type == "cuda"
    data = read_token_file(tokens_path)
    T, B = c["block_size"], args.batch_size
    windows = (len(data) - 1) // (T + 1)

    def batch(step):  # windows of T + 1 tokens, as the trainer's token file reader
        ids = [(b + step * B) % windows for b in range(B)]
        rows = torch.stack([data[i * (T + 1):(i + 1) * (T + 1)] for i in ids])
        if cuda:
            rows = rows.pin_memory()
        rows = rows.to(device, non_blocking=cuda)
        return rows[:, :-1], rows[:, 1:]

    nxt = batch(0)
    start = 0.0
    prof = None
    for step in range(args.steps):
        if step == 3:
            start = time.perf_counter()
        if step + 1 == profile_step:
            torch.cuda.synchronize()
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
            t0 = time.perf_counter()
        x, y = nxt
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            logits = model(x)
        loss = lm_loss(logits, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step + 1 < args.steps:
            nxt = batch(step + 1)  # while the GPU runs this step
        loss.item()  # the step's end: the GPU has finished it, and the loss is read, as the trainer does
        if prof is not None:
            step_s = time.perf_counter() - t0
            prof.__exit__(None, None, None)
            print_profile(prof, step_s)
            prof = None
    per_step = (time.perf_counter() - start) / (args.steps - 3)
    del model, opt
    if cuda:
        torch.cuda.empty_cache()
    return per_step


def trainer_round(args, device, flags, multiple, tokens_path, extra_out=None):
    with tempfile.TemporaryDirectory() as tmp:
        stats = os.path.join(tmp, "stats")
        cmd = [args.trainer, "--model", args.model, "--device", device.type, "--steps", str(args.steps),
               "--batch-size", str(args.batch_size), "--log-every", str(max(1, args.steps // 2)),
               "--stats-file", stats, "--lr", "1e-4", "--warmup-steps", "0", "--data", tokens_path,
               "--vocab-multiple", str(multiple)] + flags
        if device.type == "cuda":
            cmd += ["--backend", "nccl", "--precision", "bf16"]
        env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if extra_out is not None:
            extra_out.append(" ".join(cmd) + "\n" + r.stdout)
        if r.returncode != 0:
            return None, None, r.stdout
        values = dict(line.split() for line in open(stats) if line.strip())
        return float(values["wall_s_per_step"]), float(values["step_s_median"]), r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trainer", required=True, help="the lockstep-trainer binary")
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--batch-size", type=int, default=16, help="sequences per step (default 16)")
    ap.add_argument("--steps", type=int, default=30, help="steps per round; the first 3 are not timed")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--peak-tflops", type=float, default=0, help="dense bf16 peak (default: from the GPU's name)")
    ap.add_argument("--levers", default="all",
                    help="'all' (every row of LEVERS), 'best' (the last row only) or comma-separated row numbers")
    ap.add_argument("--no-eager", action="store_true", help="the trainer alone (MFU only, e.g. at 1.5B)")
    ap.add_argument("--vocab-multiple", type=int, default=64, help="eager's vocabulary padding (default 64)")
    ap.add_argument("--log", help="append every trainer command and its output here")
    ap.add_argument("--eager", default="both", choices=["both", "fused", "foreach"], help="eager baselines to run")
    ap.add_argument("--profile", type=int, default=0, metavar="STEP",
                    help="after the rounds, profile step STEP of the best trainer row and of fused eager")
    ap.add_argument("--profile-out", help="with --profile: the trainer's Chrome trace here")
    args = ap.parse_args()
    if args.steps < 8:
        ap.error("--steps must be at least 8 (3 warm-up steps are not timed)")
    if args.device == "cuda" and not torch.cuda.is_available():
        print("SKIPPED: no GPU: torch.cuda.is_available() is false (run with --device cpu to check the script)")
        return 0
    device = torch.device(args.device)
    base = PRESETS[args.model]
    if args.levers == "all":
        rows = LEVERS
    elif args.levers == "best":
        rows = [LEVERS[-1]]
    else:
        rows = [LEVERS[int(i)] for i in args.levers.split(",")]
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    peak = (args.peak_tflops or next((p for k, p in PEAKS if k in name), 0.0)) if device.type == "cuda" else 0.0
    tokens = args.batch_size * base["block_size"]
    print(f"bench/trainer gpu: {args.model}, batch {args.batch_size} x {base['block_size']} tokens, "
          f"{'bf16 autocast' if device.type == 'cuda' else 'fp32'}, {name}"
          + (f" (dense bf16 peak {peak:.0f} TFLOP/s)" if peak else " (no known peak: MFU not computed)")
          + f", torch {torch.__version__}, {args.rounds} rounds x {args.steps} steps (3 untimed)", flush=True)
    log = [] if args.log else None
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        tokens_path = os.path.join(tmp, "tokens.bin")
        make_token_file(tokens_path, base["vocab_size"], (args.batch_size * args.steps + 1) * (base["block_size"] + 1))
        for r in range(args.rounds):
            line = []
            for label, flags, multiple in rows:
                key = f"trainer, {label}"
                wall, event, out = trainer_round(args, device, flags, multiple, tokens_path, log)
                if wall is None:
                    print(f"  {key}: FAILED\n" + "\n".join("    " + l for l in out.splitlines()[-15:]), flush=True)
                    continue
                runs.setdefault(key, (multiple, []))[1].append(wall)
                line.append(f"{key} {wall * 1e3:.1f} ms (events {event * 1e3:.1f})")
                if r == 0:
                    print("  " + "\n  ".join(l for l in out.splitlines() if l.startswith("lockstep-trainer:")), flush=True)
            if not args.no_eager:
                for label, fused in (("eager, AdamW foreach", False), ("eager, AdamW fused", True)):
                    if args.eager != "both" and (args.eager == "fused") != fused:
                        continue
                    s = eager_round(padded(base, args.vocab_multiple), args, device, fused, tokens_path)
                    runs.setdefault(label, (args.vocab_multiple, []))[1].append(s)
                    line.append(f"{label} {s * 1e3:.1f} ms")
            print(f"  round {r + 1}: " + ", ".join(line), flush=True)
        if args.profile and runs:
            best_t = min((k for k in runs if k.startswith("trainer")), key=lambda k: statistics.median(runs[k][1]),
                         default=None)  # the fastest row
            if best_t is not None:
                label, flags, multiple = next(r for r in rows if f"trainer, {r[0]}" == best_t)
                flags = flags + ["--profile-step", str(args.profile)] + (["--profile-out", args.profile_out] if args.profile_out else [])
                print(f"\nprofile, {best_t}:", flush=True)
                _, _, out = trainer_round(args, device, flags, multiple, tokens_path, log)
                in_profile = False
                for l in out.splitlines():
                    in_profile = in_profile or "profile of one step" in l
                    if in_profile and (l.startswith("  ") or "profile" in l):
                        print(l)
                    elif in_profile and l.startswith("step "):
                        in_profile = False
            if not args.no_eager and device.type == "cuda":
                print("\nprofile, eager, AdamW fused:", flush=True)
                eager_round(padded(base, args.vocab_multiple), args, device, True, tokens_path, profile_step=args.profile)
    if log is not None:
        with open(args.log, "a") as f:
            f.write("\n\n".join(log) + "\n")
    print(f"\nresults (medians of {args.rounds} rounds, wall time per step; FLOPs per token: ours "
          f"{flops_ours(padded(base, 1), base['vocab_size']) / 1e9:.3f} G, llm.c's "
          f"{flops_llmc(padded(base, args.vocab_multiple)) / 1e9:.3f} G at vocabulary {padded(base, args.vocab_multiple)['vocab_size']})")
    rate = {}
    for k, (multiple, v) in runs.items():
        s = statistics.median(v)
        rate[k] = tokens / s
        c = padded(base, multiple)
        mfu = ""
        if peak:
            ours = 100 * rate[k] * flops_ours(c, base["vocab_size"]) / (peak * 1e12)
            llmc = 100 * rate[k] * flops_llmc(c) / (peak * 1e12)
            mfu = f", MFU {ours:.1f}% (llm.c's count: {llmc:.1f}%)"
        print(f"  {k:40s} {s * 1e3:8.2f} ms/step  {rate[k]:10.0f} tok/s{mfu}")
    trainer_keys = [k for k in rate if k.startswith("trainer")]
    eager_keys = [k for k in rate if k.startswith("eager")]
    if trainer_keys:
        best_t = max(trainer_keys, key=lambda k: rate[k])
        print(f"  best trainer row: {best_t}")
        if eager_keys:
            best_e = max(eager_keys, key=lambda k: rate[k])
            ratio = rate[best_t] / rate[best_e]
            print(f"  tokens/s, {best_t} / best eager ({best_e}): {ratio:.3f} "
                  f"(target >= 1.2: {'met' if ratio >= 1.2 else 'NOT met'})")
        if peak:
            mfu = 100 * rate[best_t] * flops_ours(padded(base, runs[best_t][0]), base["vocab_size"]) / (peak * 1e12)
            target = 45 if args.model == "gpt2-1558m" else 30
            print(f"  {best_t} MFU: {mfu:.1f}% (target >= {target}%: {'met' if mfu >= target else 'NOT met'})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
