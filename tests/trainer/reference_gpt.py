#!/usr/bin/env python3
"""An independent reference for lockstep-trainer's model, loss, data path and optimizer.

Plain Python (no PyTorch, no NumPy), float64, every backward pass written out by hand as in
llm.c: so it shares no kernel, autograd or library code with the LibTorch trainer it checks.
tests/trainer/reference_test.cpp runs both from the same initial weights on the same token
file and compares their losses and final parameters.

What it re-implements (trainer/model.cpp, data.cpp, optim.cpp, train.cpp):
  * the data: non-overlapping windows of T+1 uint16 tokens, inputs the first T, targets the
    last T; the test makes the global batch the whole file, so every step sees every window
    (the order the sampler picks changes only the order of a mean);
  * the GPT-2 decoder: token + position embeddings, pre-LayerNorm blocks (eps 1e-5) of causal
    self-attention (scale 1/sqrt(head size)) and a tanh-GELU MLP, a final LayerNorm and a head
    tied to the token embedding; mean cross-entropy;
  * global-norm clipping, coefficient min(1, clip / (norm + 1e-6));
  * AdamW with decoupled weight decay on every parameter (betas 0.9, 0.999, eps 1e-8) and the
    trainer's schedule: linear warm-up, then cosine decay to --min-lr.

Usage: reference_gpt.py --weights W --tokens F --out O --n-layer L --n-head H --steps S
       --lr X --min-lr X --warmup-steps N --weight-decay X --clip X
W: per parameter a line "name ndim d0 d1 ..." and a line of its values (row-major).
O: a line "loss STEP VALUE" per step, then "param NAME v0 v1 ..." per parameter.
"""
import argparse
import math
import struct
import sys

LN_EPS = 1e-5
GELU_K = math.sqrt(2.0 / math.pi)


def read_weights(path):
    params, order = {}, []
    with open(path) as f:
        lines = f.read().splitlines()
    for i in range(0, len(lines), 2):
        head = lines[i].split()
        name, ndim = head[0], int(head[1])
        shape = [int(d) for d in head[2:2 + ndim]]
        values = [float(v) for v in lines[i + 1].split()]
        if len(values) != math.prod(shape):
            sys.exit(f"{path}: {name} has {len(values)} values for shape {shape}")
        params[name] = values
        order.append((name, shape))
    return params, order


def read_windows(path, T):
    data = open(path, "rb").read()
    toks = struct.unpack(f"<{len(data) // 2}H", data)
    n = (len(toks) - 1) // T
    return [(list(toks[i * T:i * T + T]), list(toks[i * T + 1:i * T + T + 1])) for i in range(n)]


# ---- layers: forward returns (output, cache); backward accumulates parameter gradients ----

def linear(x, N, I, W, b, O):
    out = [0.0] * (N * O)
    rows = [W[o * I:(o + 1) * I] for o in range(O)]
    for n in range(N):
        xr = x[n * I:(n + 1) * I]
        base = n * O
        for o in range(O):
            out[base + o] = b[o] + sum(a * w for a, w in zip(xr, rows[o]))
    return out


def linear_back(dy, x, N, I, W, O, dW, db):
    dx = [0.0] * (N * I)
    for n in range(N):
        xr = x[n * I:(n + 1) * I]
        for o in range(O):
            g = dy[n * O + o]
            if g == 0.0:
                continue
            db[o] += g
            wo = o * I
            for i in range(I):
                dx[n * I + i] += g * W[wo + i]
                dW[wo + i] += g * xr[i]
    return dx


def layernorm(x, N, C, w, b):
    out, norm, rstd = [0.0] * (N * C), [0.0] * (N * C), [0.0] * N
    for n in range(N):
        row = x[n * C:(n + 1) * C]
        mean = sum(row) / C
        var = sum((v - mean) ** 2 for v in row) / C
        r = 1.0 / math.sqrt(var + LN_EPS)
        rstd[n] = r
        for c in range(C):
            z = (row[c] - mean) * r
            norm[n * C + c] = z
            out[n * C + c] = z * w[c] + b[c]
    return out, (norm, rstd)


def layernorm_back(dy, cache, N, C, w, dw, db):
    norm, rstd = cache
    dx = [0.0] * (N * C)
    for n in range(N):
        dn = [dy[n * C + c] * w[c] for c in range(C)]
        zs = norm[n * C:(n + 1) * C]
        m1 = sum(dn) / C
        m2 = sum(d * z for d, z in zip(dn, zs)) / C
        for c in range(C):
            dw[c] += dy[n * C + c] * zs[c]
            db[c] += dy[n * C + c]
            dx[n * C + c] = rstd[n] * (dn[c] - m1 - zs[c] * m2)
    return dx


def gelu(x):
    return [0.5 * v * (1 + math.tanh(GELU_K * (v + 0.044715 * v ** 3))) for v in x]


def gelu_back(dy, x):
    out = []
    for g, v in zip(dy, x):
        t = math.tanh(GELU_K * (v + 0.044715 * v ** 3))
        out.append(g * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * GELU_K * (1 + 3 * 0.044715 * v * v)))
    return out


def attention(qkv, B, T, C, NH):
    HS = C // NH
    scale = 1.0 / math.sqrt(HS)
    y, probs = [0.0] * (B * T * C), {}
    for b in range(B):
        for h in range(NH):
            q = [qkv[(b * T + t) * 3 * C + h * HS:(b * T + t) * 3 * C + (h + 1) * HS] for t in range(T)]
            k = [qkv[(b * T + t) * 3 * C + C + h * HS:(b * T + t) * 3 * C + C + (h + 1) * HS] for t in range(T)]
            v = [qkv[(b * T + t) * 3 * C + 2 * C + h * HS:(b * T + t) * 3 * C + 2 * C + (h + 1) * HS] for t in range(T)]
            for t1 in range(T):
                s = [scale * sum(a * c for a, c in zip(q[t1], k[t2])) for t2 in range(t1 + 1)]
                mx = max(s)
                e = [math.exp(z - mx) for z in s]
                tot = sum(e)
                p = [z / tot for z in e]
                probs[b, h, t1] = p
                for d in range(HS):
                    y[(b * T + t1) * C + h * HS + d] = sum(p[t2] * v[t2][d] for t2 in range(t1 + 1))
    return y, probs


def attention_back(dy, qkv, probs, B, T, C, NH):
    HS = C // NH
    scale = 1.0 / math.sqrt(HS)
    dqkv = [0.0] * (B * T * 3 * C)
    for b in range(B):
        for h in range(NH):
            def at(t, part):
                o = (b * T + t) * 3 * C + part * C + h * HS
                return o
            for t1 in range(T):
                p = probs[b, h, t1]
                dyr = dy[(b * T + t1) * C + h * HS:(b * T + t1) * C + (h + 1) * HS]
                dp = []
                for t2 in range(t1 + 1):
                    vo = at(t2, 2)
                    dp.append(sum(dyr[d] * qkv[vo + d] for d in range(HS)))
                    for d in range(HS):
                        dqkv[vo + d] += p[t2] * dyr[d]
                inner = sum(a * c for a, c in zip(p, dp))
                qo = at(t1, 0)
                for t2 in range(t1 + 1):
                    ds = p[t2] * (dp[t2] - inner) * scale
                    ko = at(t2, 1)
                    for d in range(HS):
                        dqkv[qo + d] += ds * qkv[ko + d]
                        dqkv[ko + d] += ds * qkv[qo + d]
    return dqkv


# ---- the model ----------------------------------------------------------------------------

def forward_backward(P, windows, L, NH, V, C):
    B, T = len(windows), len(windows[0][0])
    N = B * T
    G = {k: [0.0] * len(v) for k, v in P.items()}
    x = [0.0] * (N * C)
    for b, (inp, _) in enumerate(windows):
        for t, tok in enumerate(inp):
            for c in range(C):
                x[(b * T + t) * C + c] = P["wte.weight"][tok * C + c] + P["wpe.weight"][t * C + c]
    caches = []
    for l in range(L):
        p = lambda n: P[f"blocks.{l}.{n}"]
        a1, c1 = layernorm(x, N, C, p("ln_1.weight"), p("ln_1.bias"))
        qkv = linear(a1, N, C, p("c_attn.weight"), p("c_attn.bias"), 3 * C)
        y, probs = attention(qkv, B, T, C, NH)
        h = [u + w for u, w in zip(x, linear(y, N, C, p("c_proj.weight"), p("c_proj.bias"), C))]
        a2, c2 = layernorm(h, N, C, p("ln_2.weight"), p("ln_2.bias"))
        f = linear(a2, N, C, p("c_fc.weight"), p("c_fc.bias"), 4 * C)
        g = gelu(f)
        out = [u + w for u, w in zip(h, linear(g, N, 4 * C, p("mlp_proj.weight"), p("mlp_proj.bias"), C))]
        caches.append((x, a1, c1, qkv, y, probs, h, a2, c2, f, g))
        x = out
    xf, cf = layernorm(x, N, C, P["ln_f.weight"], P["ln_f.bias"])
    logits = linear(xf, N, C, P["wte.weight"], [0.0] * V, V)
    loss, dlogits = 0.0, [0.0] * (N * V)
    for b, (_, tgt) in enumerate(windows):
        for t, target in enumerate(tgt):
            n = b * T + t
            row = logits[n * V:(n + 1) * V]
            mx = max(row)
            e = [math.exp(z - mx) for z in row]
            tot = sum(e)
            loss += -(row[target] - mx - math.log(tot))
            for v in range(V):
                dlogits[n * V + v] = (e[v] / tot - (v == target)) / N
    loss /= N
    dxf = linear_back(dlogits, xf, N, C, P["wte.weight"], V, G["wte.weight"], [0.0] * V)
    dx = layernorm_back(dxf, cf, N, C, P["ln_f.weight"], G["ln_f.weight"], G["ln_f.bias"])
    for l in reversed(range(L)):
        p = lambda n: P[f"blocks.{l}.{n}"]
        g_ = lambda n: G[f"blocks.{l}.{n}"]
        x_in, a1, c1, qkv, y, probs, h, a2, c2, f, g = caches[l]
        dh = list(dx)  # residual
        dg = linear_back(dx, g, N, 4 * C, p("mlp_proj.weight"), C, g_("mlp_proj.weight"), g_("mlp_proj.bias"))
        df = gelu_back(dg, f)
        da2 = linear_back(df, a2, N, C, p("c_fc.weight"), 4 * C, g_("c_fc.weight"), g_("c_fc.bias"))
        dh = [u + w for u, w in zip(dh, layernorm_back(da2, c2, N, C, p("ln_2.weight"), g_("ln_2.weight"), g_("ln_2.bias")))]
        dxin = list(dh)
        dy = linear_back(dh, y, N, C, p("c_proj.weight"), C, g_("c_proj.weight"), g_("c_proj.bias"))
        dqkv = attention_back(dy, qkv, probs, B, T, C, NH)
        da1 = linear_back(dqkv, a1, N, C, p("c_attn.weight"), 3 * C, g_("c_attn.weight"), g_("c_attn.bias"))
        dx = [u + w for u, w in zip(dxin, layernorm_back(da1, c1, N, C, p("ln_1.weight"), g_("ln_1.weight"), g_("ln_1.bias")))]
    for b, (inp, _) in enumerate(windows):
        for t, tok in enumerate(inp):
            for c in range(C):
                d = dx[(b * T + t) * C + c]
                G["wte.weight"][tok * C + c] += d
                G["wpe.weight"][t * C + c] += d
    return loss, G


def lr_at(a, step):
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    progress = (step - a.warmup_steps) / max(1, a.steps - a.warmup_steps)
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * min(1.0, progress)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, kind in (("--weights", str), ("--tokens", str), ("--out", str), ("--n-layer", int), ("--n-head", int),
                       ("--steps", int), ("--lr", float), ("--min-lr", float), ("--warmup-steps", int),
                       ("--weight-decay", float), ("--clip", float)):
        ap.add_argument(flag, type=kind, required=True)
    a = ap.parse_args()
    P, order = read_weights(a.weights)
    V, C = dict(order)["wte.weight"]
    T = dict(order)["wpe.weight"][0]
    windows = read_windows(a.tokens, T)
    b1, b2, eps = 0.9, 0.999, 1e-8
    m = {k: [0.0] * len(v) for k, v in P.items()}
    s = {k: [0.0] * len(v) for k, v in P.items()}
    losses = []
    for step in range(a.steps):
        lr = lr_at(a, step)
        loss, G = forward_backward(P, windows, a.n_layer, a.n_head, V, C)
        losses.append(loss)
        if a.clip > 0:
            norm = math.sqrt(sum(g * g for v in G.values() for g in v))
            coef = min(1.0, a.clip / (norm + 1e-6))
            G = {k: [g * coef for g in v] for k, v in G.items()}
        t = step + 1
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        for k in P:
            p, g, mk, sk = P[k], G[k], m[k], s[k]
            for i in range(len(p)):
                p[i] *= 1 - lr * a.weight_decay
                mk[i] = b1 * mk[i] + (1 - b1) * g[i]
                sk[i] = b2 * sk[i] + (1 - b2) * g[i] * g[i]
                p[i] -= (lr / bc1) * mk[i] / (math.sqrt(sk[i]) / math.sqrt(bc2) + eps)
    with open(a.out, "w") as f:
        for i, loss in enumerate(losses):
            f.write(f"loss {i + 1} {loss!r}\n")
        for name, _ in order:
            f.write(f"param {name} " + " ".join(repr(v) for v in P[name]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
