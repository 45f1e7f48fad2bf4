"""Gradient accumulation: 4 micro-batches (forward and backward each) per optimizer step.

    python tests/py/grad_accumulation.py --steps 3 --micro 4

Prints `steps 3 micro_batches 12`."""

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--micro", type=int, default=4)
args = p.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
micro = 0
for step in range(args.steps):
    opt.zero_grad()
    for m in range(args.micro):
        x = torch.randn(8, 32)
        (model(x).pow(2).mean() / args.micro).backward()
        micro += 1
    opt.step()
print(f"steps {args.steps} micro_batches {micro}")
