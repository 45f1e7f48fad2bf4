"""Hugging Face GPT-2 built from a small config (no weights), AdamW, a few steps on random
tokens. --checkpointing: model.gradient_checkpointing_enable(); --bf16: CPU autocast."""
import argparse
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--checkpointing", action="store_true")
ap.add_argument("--bf16", action="store_true")
args = ap.parse_args()

torch.manual_seed(0)
cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64)
model = GPT2LMHeadModel(cfg)
if args.checkpointing:
    model.gradient_checkpointing_enable()
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, cfg.vocab_size, (2, 32))
params = sum(p.numel() * p.element_size() for p in model.parameters())
print(f"param_bytes={params}")
for step in range(args.steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item()!r}")
    print(f"step {step} seconds {time.perf_counter() - t0:.4f}", file=sys.stderr)
