#!/usr/bin/env python3
"""Capture real allocator snapshots on a CUDA GPU: a small GPT-style transformer trained with
variable sequence lengths (as real jobs with packed or bucketed batches do, which is what
fragments the caching allocator), under `torch.cuda.memory._record_memory_history`.

The allocation requests depend only on --seed, not on PYTORCH_CUDA_ALLOC_CONF, so captures of
the same run under different allocator settings can be compared with `memtrack simulate`.

  python scripts/capture_gpu_snapshots.py --out snap.pickle [--steps 12] [--stacks python]
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python scripts/capture_gpu_snapshots.py ...
  python scripts/capture_gpu_snapshots.py --out big.pickle --stacks all --events 3000000
  python scripts/capture_gpu_snapshots.py --out oom.pickle --memory-fraction 0.02   # ends in an OOM

Prints one JSON line: steps run, the peak reserved / allocated the allocator reports, and
whether the run ended in an out-of-memory error.
"""

import argparse
import json
import os
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--events", type=int, default=0,
                    help="run steps until about this many trace events (overrides --steps)")
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--stacks", choices=["python", "all"], default="python")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--memory-fraction", type=float, default=0.0,
                    help="cap this process's share of the GPU (provokes an OOM)")
    args = ap.parse_args()

    if args.memory_fraction:
        torch.cuda.set_per_process_memory_fraction(args.memory_fraction)
    max_entries = max(args.events * 2, 1_000_000)
    torch.cuda.memory._record_memory_history(max_entries=max_entries, context="all", stacks=args.stacks)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    vocab = 8192
    model = GPT(vocab, args.d, args.layers, heads=8, max_len=args.max_len).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    steps = args.steps if not args.events else 10**9
    start = time.perf_counter()
    oom = False
    done = 0
    per_step_events = None
    try:
        for step in range(steps):
            # lengths in multiples of 64, as bucketed batches have
            t = 64 * rng.randint(1, args.max_len // 64)
            idx = torch.randint(0, vocab, (args.batch, t), device="cuda")
            loss = F.cross_entropy(model(idx).view(-1, vocab), idx.view(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if args.events:
                if step == 4:
                    torch.cuda.synchronize()
                    n = len(torch.cuda.memory._snapshot()["device_traces"][0])
                    per_step_events = n / 5
                if per_step_events and done * per_step_events >= args.events:
                    break
                if time.perf_counter() - start > args.max_seconds:
                    break
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        oom = True
    torch.cuda.memory._dump_snapshot(args.out)
    torch.cuda.memory._record_memory_history(enabled=None)
    print(json.dumps({
        "out": args.out, "steps": done, "oom": oom,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "num_alloc_retries": torch.cuda.memory_stats().get("num_alloc_retries", 0),
        "seconds": round(time.perf_counter() - start, 1),
        "bytes": os.path.getsize(args.out),
        "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
    }), flush=True)


if __name__ == "__main__":
    main()
